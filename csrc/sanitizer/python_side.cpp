// What the sanitizer needs from Python (python_side.h).
#include "sanitizer/python_side.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/utils/pybind.h>

namespace spyre::sanitizer {
namespace {

// Frames inside these packages are not the user's.
bool isLibraryFrame(const std::string& file) {
  return file.find("/torch/") != std::string::npos ||
         file.find("/torch_spyre/") != std::string::npos || file.rfind("<frozen", 0) == 0;
}

constexpr int kFrames = 4;  // the innermost user frames shown

}  // namespace

std::string pythonStack() {
  if (!Py_IsInitialized() || _Py_IsFinalizing()) return "";
  pybind11::gil_scoped_acquire gil;
  std::vector<std::string> lines;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame != nullptr && static_cast<int>(lines.size()) < kFrames) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    const char* name = PyUnicode_AsUTF8(code->co_name);
    if (file != nullptr && !isLibraryFrame(file)) {
      lines.push_back("    " + std::string(file) + ":" + std::to_string(PyFrame_GetLineNumber(frame)) +
                      " in " + (name != nullptr ? name : "?") + "\n");
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

void raiseUnsynchronizedAccess(const std::string& message) {
  {
    pybind11::gil_scoped_acquire gil;
    try {
      pybind11::object error =
            pybind11::module_::import("torch_spyre.sanitizer").attr("UnsynchronizedAccessError");
      PyErr_SetObject(error.ptr(), pybind11::str(message).ptr());
    } catch (pybind11::error_already_set& e) {
      e.restore();  // the import failed: that error goes up instead
    }
  }
  python_error err;
  err.persist();
  throw err;
}

}  // namespace spyre::sanitizer
