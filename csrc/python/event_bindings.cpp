// torch.Event helpers (python/bindings.h).
#include <string>

#include <torch/csrc/Event.h>

#include "python/bindings.h"

namespace spyre::python {
namespace {

THPEvent* asTorchEvent(const py::handle& obj, const char* what) {
  TORCH_CHECK_TYPE(THPEvent_Check(obj.ptr()), "expected ", what, " to be a torch.Event, got ",
                   py::str(obj).cast<std::string>(), " of type ",
                   Py_TYPE(obj.ptr())->tp_name);
  return reinterpret_cast<THPEvent*>(obj.ptr());
}

}  // namespace

void bindEvents(py::module_& m) {
  // torch's Event.elapsed_time accepts only an exact torch.Event as its
  // argument, which rejects torch.spyre.Event (a subclass). This runs the same
  // c10::Event::elapsedTime, with the same checks and errors, for subclasses too.
  m.def("_event_elapsed_time", [](const py::handle& start, const py::handle& end) {
    return asTorchEvent(start, "start")->event.elapsedTime(asTorchEvent(end, "end_event")->event);
  });
}

}  // namespace spyre::python
