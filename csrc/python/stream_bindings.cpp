// Streams: the pool, the current and default streams, the host-compute
// streams, device synchronization (python/bindings.h).
#include <string>

#include <ATen/record_function.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/Stream.h>
#include <torch/csrc/utils/pybind.h>

#include "python/bindings.h"
#include "runtime/runtime.h"

namespace spyre::python {
namespace {

// Upstream's host-compute stream API: _C.host_compute_stream(device) and
// _C.host_compute_stream_by_id(id, device) return a _SpyreStreamBase (id(),
// query(), synchronize(), device(), priority()); torch.spyre.host_compute_stream()
// wraps the same stream in a torch.spyre.Stream.
// Bound as a type with internal linkage: pybind11's classes are hidden, and a
// class_ of the exported SpyreStream would have greater visibility.
struct BareStream {
  SpyreStream stream;
};

void bindHostComputeStreams(py::module_& m) {
  m.attr("_first_host_compute_stream_id") = kFirstHostComputeStreamId;
  py::class_<BareStream>(m, "_SpyreStreamBase")
      .def("id", [](const BareStream& s) { return s.stream.id(); }, "The stream id.")
      .def("device", [](const BareStream& s) { return s.stream.device(); }, "The stream's device.")
      .def("priority", [](const BareStream& s) { return s.stream.priority(); },
           "0 (low priority or host-compute) or -1 (high priority).")
      .def("query", [](const BareStream& s) { return s.stream.query(); },
           "True iff all work launched on the stream has finished.")
      .def("synchronize", [](const BareStream& s) { s.stream.synchronize(); },
           "Wait for all work launched on the stream (releases the GIL).")
      .def("__eq__", [](const BareStream& a, const BareStream& b) { return a.stream == b.stream; })
      .def("__hash__",
           [](const BareStream& s) { return std::hash<c10::Stream>()(s.stream.unwrap()); })
      .def("__repr__", [](const BareStream& s) {
        return "<torch_spyre._C._SpyreStreamBase device=spyre:" +
               std::to_string(static_cast<int>(s.stream.device_index())) + " id=" +
               std::to_string(s.stream.id()) + ">";
      });
  m.def("host_compute_stream",
        [](const py::object& device) {
          return BareStream{getHostComputeStream(deviceFromPython(device))};
        },
        py::arg("device") = py::none(),
        "The next host-compute stream of the device (round robin over ids 65..65+N-1).");
  m.def("host_compute_stream_by_id",
        [](c10::StreamId id, const py::object& device) {
          return BareStream{getHostComputeStreamById(id, deviceFromPython(device))};
        },
        py::arg("id"), py::arg("device") = py::none(),
        "The host-compute stream with this id (65..65+N-1).");
  m.def("_num_host_compute_streams", &hostComputeStreamCount);
}

// torch.spyre.Stream.synchronize. torch.Stream's binding releases the GIL
// around every call; this one leaves that to the host wait (runtime/host_wait.h),
// which a stream found idle skips: waiting for an idle stream costs what
// query() does.
PyObject* synchronizeStream(PyObject* self, PyObject* /*noargs*/) {
  HANDLE_TH_ERRORS
  const auto* stream = reinterpret_cast<const THPStream*>(self);
  SpyreStream(c10::Stream::unpack3(stream->stream_id,
                                   static_cast<c10::DeviceIndex>(stream->device_index),
                                   static_cast<c10::DeviceType>(stream->device_type)))
      .synchronize();
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef synchronize_method = {
    "synchronize", synchronizeStream, METH_NOARGS,
    "Wait for all work launched on this stream (the GIL is released while it waits)."};

}  // namespace

void bindStreams(py::module_& m) {
  // A method of torch.Stream (a C method descriptor: no Python frame per call),
  // which torch_spyre/streams.py puts on torch.spyre.Stream.
  m.attr("_stream_synchronize") = py::reinterpret_steal<py::object>(
      PyDescr_NewMethod(THPStreamClass, &synchronize_method));
  m.attr("_default_stream_id") = kDefaultStreamId;
  m.attr("_first_low_priority_stream_id") = kFirstLowPriorityStreamId;
  m.attr("_first_high_priority_stream_id") = kFirstHighPriorityStreamId;
  m.attr("_num_pool_stream_ids") = kNumPoolStreamIds;
  m.attr("_low_priority") = kLowPriority;
  m.attr("_high_priority") = kHighPriority;
  m.attr("_max_sleep_ms") = kMaxDelayMilliseconds;
  m.def("_get_stream_from_pool",
        [](int64_t device, int priority) {
          return key(getStreamFromPool(priority, deviceArg(device)));
        },
        py::arg("device"), py::arg("priority"));
  m.def("_current_stream", [](int64_t device) { return key(getCurrentStream(deviceArg(device))); });
  m.def("_default_stream", [](int64_t device) { return key(getDefaultStream(deviceArg(device))); });
  m.def("_set_current_stream", [](c10::StreamId id, int64_t device) {
    return key(setCurrentStream(fromKey(id, device)));
  });
  m.def("_synchronize", [](int64_t device) { synchronizeDeviceOrThrow(deviceArg(device)); });
  bindHostComputeStreams(m);
  m.def("_synchronize_no_throw", [](int64_t device) {
    std::string consumed;
    const bool failed = synchronizeDeviceNoThrow(deviceArg(device), consumed);
    return py::make_tuple(failed, consumed);
  });
  m.def("_sleep", [](double milliseconds) {
    RECORD_FUNCTION("spyre::_sleep", c10::ArrayRef<const c10::IValue>{});  // the profiler's CPU op
    getCurrentStream(-1).launchDelay(milliseconds);
  });
  m.def("_mapped_stream_count", &mappedStreamCount);
}

}  // namespace spyre::python
