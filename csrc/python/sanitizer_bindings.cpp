// The stream sanitizer's Python side (torch_spyre/sanitizer.py; runtime/sanitizer.h):
// its switch, the user's frames of a launch, and reports raised as
// torch.spyre.sanitizer.UnsynchronizedAccessError.
#include <string>
#include <vector>

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

#include "launch/sanitizer_accesses.h"
#include "launch/sanitizer_host.h"
#include "python/bindings.h"
#include "runtime/sanitizer.h"

namespace spyre::python {
namespace {

// The folders of torch's and torch_spyre's packages (with the GIL held).
const std::vector<std::string>& libraryFolders() {
  static const std::vector<std::string> folders = [] {
    std::vector<std::string> out;
    py::module_ path = py::module_::import("os.path");
    for (const char* package : {"torch", "torch_spyre"}) {
      py::object file = py::module_::import(package).attr("__file__");
      out.push_back(path.attr("dirname")(file).cast<std::string>() + "/");
    }
    return out;
  }();
  return folders;
}

// Frames inside torch or torch_spyre, or frozen importlib, are not the user's.
bool isLibraryFrame(const std::string& file) {
  if (file.rfind("<frozen", 0) == 0) return true;
  for (const std::string& folder : libraryFolders()) {
    if (file.rfind(folder, 0) == 0) return true;
  }
  return false;
}

constexpr int kFrames = 4;  // the innermost user frames shown

// "    file.py:12 in f\n" per user frame, innermost last; empty when the
// thread runs no Python (an autograd device thread) or Python is finalizing.
std::string pythonStack() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return "";
  py::gil_scoped_acquire gil;
  std::vector<std::string> lines;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && static_cast<int>(lines.size()) < kFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    if (file != nullptr && !isLibraryFrame(file)) {
      lines.push_back("    " + std::string(file) + ":" +
                      std::to_string(PyFrame_GetLineNumber(frame)) + " in " +
                      (name != nullptr ? name : "?") + "\n");
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyErr_Clear();
  std::string out;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) out += *it;
  return out;
}

// The Python error travels inside a python_error, restored at the binding
// that called into the launch.
void raiseUnsynchronizedAccess(const std::string& report) {
  {
    py::gil_scoped_acquire gil;
    try {
      py::object error =
          py::module_::import("torch_spyre.sanitizer").attr("UnsynchronizedAccessError");
      PyErr_SetObject(error.ptr(), py::str(report).ptr());
    } catch (py::error_already_set& e) {
      e.restore();  // the import failed: that error goes up instead
    }
  }
  python_error err;
  err.persist();
  throw err;
}

}  // namespace

void bindSanitizer(py::module_& m) {
  sanitizer::setReporting({&pythonStack, &raiseUnsynchronizedAccess});
  // 0: off, 1: raise, 2: warn, 3: order (the hazard tracker). Turning it off
  // forgets every access.
  m.def("_sanitizer_set_mode", [](int mode) {
    TORCH_CHECK_VALUE(mode >= 0 && mode <= 3, "sanitizer mode must be 0, 1, 2 or 3, got ", mode);
    sanitizer::setMode(static_cast<sanitizer::Mode>(mode));
  });
  m.def("_sanitizer_mode", [] { return static_cast<int>(sanitizer::mode()); });
  m.def("_sanitizer_ordering_waits", &sanitizer::orderingWaits);
  m.def("_sanitizer_internal_thread", &sanitizer::markInternalThread);
  // The host side of copies: whether a copy's host bytes are pending, and a
  // host read outside the dispatcher (Tensor.numpy(), tolist(): torch_spyre/sanitizer.py).
  m.def("_sanitizer_host_pending", &sanitizer::hostPending);
  m.def("_sanitizer_host_read", [](const at::Tensor& t, const std::string& op) {
    sanitizer::checkHostTensor(t, op, /*write=*/false);
  });
  // A collective that reads and writes device memory in place (spyreccl's
  // direct path) as one access on the group's communication stream, ordered
  // after the caller's stream up to the call (torch_spyre/distributed).
  m.def("_sanitizer_collective", [](c10::StreamId comm, c10::StreamId caller, const std::string& name,
                                    const std::vector<at::Tensor>& tensors,
                                    const std::vector<bool>& writes) {
    if (!sanitizer::enabled()) return;
    TORCH_CHECK_VALUE(tensors.size() == writes.size(), "one write flag per tensor");
    std::vector<sanitizer::Access> accesses;
    for (size_t i = 0; i < tensors.size(); ++i) sanitizer::addTensor(accesses, tensors[i], writes[i]);
    sanitizer::onStreamFollows(comm, caller);
    // The collective itself is queued by the caller right after.
    sanitizer::onLaunch(comm, name, accesses, [] {});
  });
}

}  // namespace spyre::python
