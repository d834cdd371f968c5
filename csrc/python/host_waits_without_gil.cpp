// Host waits from Python threads (runtime/host_wait.h): the GIL is released
// while a thread waits, and a thread of a finalizing interpreter is parked
// instead of returning to Python.
#include <Python.h>

#include "python/bindings.h"
#include "runtime/host_wait.h"

namespace spyre::python {
namespace {

unsigned long main_thread_ident = 0;

// True while the interpreter finalizes, for a Python thread other than the
// main one: such a thread would be killed by pthread_exit when it re-takes
// the GIL (see parkIfExiting()). Callable without the GIL.
bool mustNotReturnToPython() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  const bool finalizing = Py_IsFinalizing();
#else
  const bool finalizing = _Py_IsFinalizing();
#endif
  return finalizing && PyGILState_GetThisThreadState() != nullptr &&
         PyThread_get_thread_ident() != main_thread_ident;
}

// Host waits release the GIL (runtime/host_wait.h): an engine thread or
// another Python thread may need it to finish what this thread waits for.
void waitWithoutGil(HostWaitFn fn, void* arg) noexcept {
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* state = PyEval_SaveThread();
    fn(arg);
    parkIfExiting();  // before re-taking the GIL: a finalizing interpreter would end the thread
    PyEval_RestoreThread(state);
  } else {
    fn(arg);
  }
}

}  // namespace

void installHostWaitHooks() {
  main_thread_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  setExitParkCheck(&mustNotReturnToPython);
  setHostWaitWrapper(&waitWithoutGil);
}

}  // namespace spyre::python
