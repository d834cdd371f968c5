// The Python stack in the runtime's report of a host access to device memory
// (flex::setDeviceFaultReporter): written from the signal handler, as
// faulthandler writes its own, without allocating or taking the GIL.
#include <Python.h>
#include <unistd.h>

#include <cstring>

#include <flex/flex.hpp>

#include "python/bindings.h"

// CPython's faulthandler dump (exported, async-signal-safe).
extern "C" void _Py_DumpTraceback(int fd, PyThreadState* tstate);

namespace spyre::python {
namespace {

void put(int fd, const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(fd, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void dumpPythonStack(int fd) {
  PyThreadState* tstate = PyGILState_GetThisThreadState();
  if (tstate == nullptr) {
    put(fd, "No Python stack: the access came from a thread that never ran Python.\n");
    return;
  }
  put(fd, "Python ");  // "Python Stack (most recent call first):"
  _Py_DumpTraceback(fd, tstate);
}

}  // namespace

void installDeviceFaultStack() { flex::setDeviceFaultReporter(dumpPythonStack); }

}  // namespace spyre::python
