// torch_spyre._testing: the emulated runtime's test facilities (flex/testing.hpp)
// for the project's tests, examples and users who test their own code on the
// emulator. Built as its own module so torch_spyre._C stays product code that
// links against the real runtime as well. No torch here: a stream arrives as
// its native handle (torch.Stream.native_handle, the flex::RuntimeStream*).
#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

#include <flex/flex.hpp>
#include <flex/testing.hpp>

namespace py = pybind11;

namespace {

flex::RuntimeStream* asStream(std::uintptr_t native_handle) {
  if (native_handle == 0) {
    throw py::value_error("expected the native handle of a spyre stream, got 0");
  }
  return reinterpret_cast<flex::RuntimeStream*>(native_handle);
}

}  // namespace

PYBIND11_MODULE(_testing, m) {
  m.doc() = "Test facilities of the emulated Spyre runtime (flex_stub)";
  py::register_exception<flex::Error>(m, "FlexError", PyExc_RuntimeError);

  py::class_<flex::test::Gate>(m, "Gate")
      .def(py::init<>())
      .def("enqueue",
           [](flex::test::Gate& gate, std::uintptr_t handle) { gate.enqueueOn(asStream(handle)); })
      .def("release", &flex::test::Gate::release)
      .def_property_readonly("blocked_streams", &flex::test::Gate::blockedStreams);
  m.def("inject_fault", [](std::uintptr_t handle, const std::string& message) {
    flex::test::injectFault(asStream(handle), message);
  });
  // The stub's Chrome trace of device operations (pid = card, tid = flex stream id).
  m.def("trace_start", &flex::test::startTrace);
  m.def("trace_stop", &flex::test::stopTrace, py::arg("path"));
  m.def("launched_ops",
        [](std::uintptr_t handle) { return flex::test::launchedOps(asStream(handle)); });
  m.def("completed_ops",
        [](std::uintptr_t handle) { return flex::test::completedOps(asStream(handle)); });
  // The device fault report's tests (they end in a fatal signal).
  m.def("lock_device_memory_registry", &flex::test::lockDeviceMemoryRegistry);
  m.def("unlock_device_memory_registry", &flex::test::unlockDeviceMemoryRegistry);
  m.def("exhaust_device_memory_backing", &flex::test::exhaustDeviceMemoryBacking);
}
