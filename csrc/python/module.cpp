// Python bindings of torch_spyre._C. The only translation unit that includes
// torch/extension.h (it alone costs ~20 s to compile). Streams cross the
// boundary as (stream_id, device_index) pairs; torch_spyre wraps them in
// torch.Stream subclasses.
#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Event.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/Stream.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/extension.h>

#include "aten/autograd_exit.h"
#include "aten/compiled_kernel.h"
#include "aten/launch.h"
#include "aten/tensor_ref.h"
#include "runtime/error.h"
#include "runtime/host_wait.h"
#include "device/generator.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace py = pybind11;

namespace spyre {
namespace {

using StreamKey = std::pair<c10::StreamId, int>;

StreamKey key(const SpyreStream& stream) {
  return {stream.id(), static_cast<int>(stream.device_index())};
}

// Every device index from Python is checked before it narrows to
// c10::DeviceIndex (an int8_t: 256 would wrap to spyre:0).
c10::DeviceIndex deviceArg(int64_t index) {
  TORCH_CHECK(index >= -1 && index < kMaxDevices, "Invalid device index ", index,
              ": expected -1 (current device) or an index in [0, ", kMaxDevices - 1, "]");
  return static_cast<c10::DeviceIndex>(index);
}

// torch.Stream(stream_id, device_index, device_type) narrows device_index to
// c10::DeviceIndex unchecked and asks no backend (300 would name spyre:44).
// Its constructor is wrapped once: a spyre index is checked first.
newfunc torch_stream_new = nullptr;

PyObject* checkedTorchStreamNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  const auto argument = [&](Py_ssize_t position, const char* name) -> PyObject* {
    if (args != nullptr && PyTuple_Size(args) > position) return PyTuple_GET_ITEM(args, position);
    return kwargs != nullptr ? PyDict_GetItemString(kwargs, name) : nullptr;
  };
  PyObject* index = argument(1, "device_index");
  PyObject* device_type = argument(2, "device_type");
  if (index != nullptr && device_type != nullptr && PyLong_Check(index) &&
      PyLong_Check(device_type)) {
    int overflow = 0;
    const long long type_value = PyLong_AsLongLongAndOverflow(device_type, &overflow);
    if (overflow == 0 && type_value == static_cast<long long>(c10::DeviceType::PrivateUse1)) {
      const long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
      if (overflow != 0 || value < -1 || value >= kMaxDevices) {
        PyErr_Format(PyExc_ValueError,
                     "Invalid device index %S: expected -1 (current device) or an index in [0, %d]",
                     index, kMaxDevices - 1);
        return nullptr;
      }
    }
  }
  return torch_stream_new(type, args, kwargs);
}

void checkTorchStreamIndices() {
  if (torch_stream_new == nullptr) {
    torch_stream_new = THPStreamClass->tp_new;
    THPStreamClass->tp_new = &checkedTorchStreamNew;
  }
}

// A device argument as upstream's bindings take it: None (the current
// device), an int, a str or a torch.device, of type spyre.
c10::DeviceIndex deviceFromPython(const py::handle& device) {
  if (device.is_none()) return -1;
  if (PyLong_Check(device.ptr()) && !PyBool_Check(device.ptr())) {
    return deviceArg(device.cast<int64_t>());
  }
  std::optional<c10::Device> parsed;
  if (THPDevice_Check(device.ptr())) {
    parsed = reinterpret_cast<THPDevice*>(device.ptr())->device;
  } else if (py::isinstance<py::str>(device)) {
    parsed = c10::Device(device.cast<std::string>());
  }
  TORCH_CHECK_TYPE(parsed.has_value(), "expected device to be None, an int, a str or a "
                   "torch.device, got ", py::repr(device).cast<std::string>(), " of type ",
                   Py_TYPE(device.ptr())->tp_name);
  TORCH_CHECK_VALUE(parsed->type() == c10::DeviceType::PrivateUse1,
                    "expected a spyre device, got ", parsed->str());
  return parsed->has_index() ? parsed->index() : -1;
}

SpyreStream fromKey(c10::StreamId id, int64_t device_index) {
  return SpyreStream(c10::Stream(
      c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, deviceArg(device_index)), id));
}

void bindRuntime(py::module_& m) {
  m.attr("_device_type") = static_cast<int>(c10::DeviceType::PrivateUse1);
  m.def("start_runtime", &startRuntime, "Start the Spyre runtime (once per process).");
  m.def("free_runtime", &freeRuntime,
        "Drop the runtime context; restarting in the same process is not supported.");
  m.def("_is_initialized", [] { return isRuntimeStarted(); });
  m.def("_is_in_bad_fork", &isInBadFork);
  m.def("device_count", [] { return static_cast<int>(deviceCount()); });
  m.def("current_device", [] { return static_cast<int>(currentDevice()); });
  m.def("set_device", [](int64_t index) { setCurrentDevice(deviceArg(index)); });
  // Limits and ids defined once, in C++; torch_spyre reads them from here.
  m.attr("_max_devices") = static_cast<int>(kMaxDevices);
  m.def("_bound_device", [] { return static_cast<int>(boundDevice()); });
  m.def("_threads_in_host_waits", &threadsInHostWaits,
        "Threads blocked in (or entering) a wait on device work.");
  m.def("_drain_autograd_device_thread",
        [](int64_t device, double timeout) { return drainAutogradDeviceThread(deviceArg(device), timeout); },
        py::call_guard<py::gil_scoped_release>());
}

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

void bindStreams(py::module_& m) {
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
  m.def("_synchronize", [](int64_t device) { synchronizeDevice(deviceArg(device)); });
  bindHostComputeStreams(m);
  m.def("_drain", [](int64_t device) {
    std::string consumed;
    const bool failed = drainDevice(deviceArg(device), consumed);
    return py::make_tuple(failed, consumed);
  });
  m.def("_sleep", [](double milliseconds) {
    RECORD_FUNCTION("spyre::_sleep", c10::ArrayRef<const c10::IValue>{});  // the profiler's CPU op
    getCurrentStream(-1).launchDelay(milliseconds);
  });
  m.def("_mapped_stream_count", &mappedStreamCount);
  m.def("_host_view", &hostView, "A CPU tensor over a spyre tensor's memory (spyreccl).");
}

THPEvent* asTorchEvent(const py::handle& obj, const char* what) {
  TORCH_CHECK_TYPE(THPEvent_Check(obj.ptr()), "expected ", what, " to be a torch.Event, got ",
                   py::str(obj).cast<std::string>(), " of type ",
                   Py_TYPE(obj.ptr())->tp_name);
  return reinterpret_cast<THPEvent*>(obj.ptr());
}

void bindEvents(py::module_& m) {
  // torch's Event.elapsed_time accepts only an exact torch.Event as its
  // argument, which rejects torch.spyre.Event (a subclass). This runs the same
  // c10::Event::elapsedTime, with the same checks and errors, for subclasses too.
  m.def("_event_elapsed_time", [](const py::handle& start, const py::handle& end) {
    return asTorchEvent(start, "start")->event.elapsedTime(asTorchEvent(end, "end_event")->event);
  });
}

// Plain ints cross the boundary; torch_spyre/errors.py wraps them in IntEnums.
void bindErrors(py::module_& m) {
  m.def("_get_device_state", [] { return static_cast<int>(SpyreGetDeviceState()); });
  m.def("_stream_get_error", [](c10::StreamId id, int64_t device) {
    return static_cast<int>(SpyreStreamGetError(fromKey(id, device)));
  });
  m.def("_stream_get_error_string", [](int error) {
    return std::string(SpyreStreamGetErrorString(static_cast<SpyreStreamError>(error)));
  });
}

void bindGenerators(py::module_& m) {
  // No argument (or -1): the current device's generator, as upstream.
  m.def(
      "_get_default_generator",
      [](int64_t device) {
        return py::reinterpret_steal<py::object>(
            THPGenerator_initDefaultGenerator(defaultGenerator(deviceArg(device))));
      },
      py::arg("device") = -1);
}

// The bound device's properties (starts the runtime, as CUDA's does).
void bindDeviceProperties(py::module_& m) {
  m.def("_device_properties", [](int64_t device) {
    ensureDevice(deviceArg(device));
    const flex::DeviceProperties properties = runtimeContext()->properties();
    py::dict result;
    result["name"] = properties.name;
    result["card_index"] = properties.card_index;
    result["total_memory"] = properties.total_memory;
    result["engines"] = properties.engines;
    result["dma_engines"] = properties.dma_engines;
    return result;
  });
}

py::dict statDict(const c10::CachingAllocator::Stat& stat) {
  py::dict result;
  result["current"] = stat.current;
  result["peak"] = stat.peak;
  result["allocated"] = stat.allocated;
  result["freed"] = stat.freed;
  return result;
}

py::dict durationDict(const c10::CachingAllocator::DurationStat& stat) {
  py::dict result;
  result["total"] = stat.total;
  result["max"] = stat.max;
  result["min"] = stat.min;
  result["count"] = stat.count;
  result["avg"] = stat.count == 0 ? 0 : stat.total / stat.count;
  return result;
}

// The pinned host allocator's statistics, with torch.cuda.host_memory_stats' keys.
void bindHostMemory(py::module_& m) {
  m.def("_host_memory_stats", [] {
    const at::HostStats stats = at::getHostAllocator(c10::DeviceType::PrivateUse1)->get_stats();
    py::dict result;
    result["allocations"] = statDict(stats.allocations);
    result["allocated_bytes"] = statDict(stats.allocated_bytes);
    result["active_requests"] = statDict(stats.active_requests);
    result["active_bytes"] = statDict(stats.active_bytes);
    result["num_host_alloc"] = stats.num_host_alloc;
    result["num_host_free"] = stats.num_host_free;
    result["host_alloc_time"] = durationDict(stats.host_alloc_time);
    result["host_free_time"] = durationDict(stats.host_free_time);
    return result;
  });
  m.def("_host_reset_accumulated_stats", [] {
    at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_accumulated_stats();
  });
  m.def("_host_reset_peak_stats",
        [] { at::getHostAllocator(c10::DeviceType::PrivateUse1)->reset_peak_stats(); });
}

}  // namespace
}  // namespace spyre

namespace spyre {
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

// torch.compile's kernels (torch_spyre/_inductor): called with the
// arguments inductor passes, queued on the current stream.
void bindCompiledKernels(py::module_& m) {
  py::class_<CompiledKernel>(m, "_CompiledKernel")
      .def(py::init<uintptr_t, std::string, std::string>(), py::arg("entry"), py::arg("kinds"),
           py::arg("name"))
      .def_property_readonly("name", &CompiledKernel::name)
      .def("__call__", [](const CompiledKernel& kernel, const py::args& args) {
        const std::string& kinds = kernel.kinds();
        TORCH_CHECK_TYPE(args.size() == kinds.size(), "compiled kernel ", kernel.name(), " takes ",
                         kinds.size(), " arguments, got ", args.size());
        const SpyreStream stream = getCurrentStream(-1);
        CompiledKernel::Slots slots(kinds.size(), 0);
        size_t bytes = 0;
        for (size_t i = 0; i < kinds.size(); ++i) {
          const py::handle arg = args[i];
          switch (kinds[i]) {
            case 'p': {
              TORCH_CHECK_TYPE(THPVariable_Check(arg.ptr()), "compiled kernel ", kernel.name(),
                               ": argument ", i, " must be a tensor, got ",
                               py::str(py::type::of(arg)).cast<std::string>());
              const at::Tensor& t = THPVariable_Unpack(arg.ptr());
              TORCH_CHECK_VALUE(t.device() == stream.device(), "compiled kernel ", kernel.name(),
                                ": argument ", i, " is on ", t.device(), ", expected ",
                                stream.device());
              slots[i] = reinterpret_cast<uintptr_t>(t.data_ptr());
              bytes += t.nbytes();
              break;
            }
            case 'i': {
              const int64_t value = arg.cast<int64_t>();
              std::memcpy(&slots[i], &value, sizeof(value));
              break;
            }
            case 'f': {
              const float value = arg.cast<float>();
              std::memcpy(&slots[i], &value, sizeof(value));
              break;
            }
            default: {
              const double value = arg.cast<double>();
              std::memcpy(&slots[i], &value, sizeof(value));
            }
          }
        }
        kernel.launch(stream, std::move(slots), bytes);
      });
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
}  // namespace spyre

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_spyre native extension: Spyre runtime, streams and tensors";
  // Tell torch the device is initialized even when the runtime was started
  // from C++ (e.g. by torch.Stream()), so torch.accelerator.synchronize()
  // is not skipped as "device not initialized".
  spyre::setRuntimeStartedCallback(
      [] { torch::utils::set_requires_device_init(c10::DeviceType::PrivateUse1, false); });
  spyre::main_thread_ident =
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  spyre::setExitParkCheck(&spyre::mustNotReturnToPython);
  spyre::setHostWaitWrapper(&spyre::waitWithoutGil);
  spyre::registerFunctionalForms();
  spyre::checkTorchStreamIndices();
  spyre::bindRuntime(m);
  spyre::bindStreams(m);
  spyre::bindEvents(m);
  spyre::bindErrors(m);
  spyre::bindGenerators(m);
  spyre::bindDeviceProperties(m);
  spyre::bindHostMemory(m);
  spyre::bindCompiledKernels(m);
}
