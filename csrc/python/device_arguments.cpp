// Device and stream arguments from Python (python/bindings.h).
#include <dlfcn.h>

#include <optional>
#include <string>

#include <torch/csrc/Device.h>
#include <torch/csrc/Stream.h>

#include "python/bindings.h"
#include "runtime/runtime.h"

namespace spyre::python {
namespace {

// torch.Stream(stream_id, device_index, device_type) narrows device_index to
// c10::DeviceIndex unchecked and asks no backend (300 would name spyre:44).
// torch 2.13 offers a backend no hook there: c10::Stream::unpack3 builds the
// stream without a DeviceGuardImpl or PrivateUse1HooksInterface call (only the
// torch.Stream(device=...) form asks the guard, for a new stream). So its
// constructor (THPStreamClass->tp_new) is wrapped once, and only when it is
// torch's own (its code in libtorch_python): a spyre index is checked first.
// Upstream change that would retire it: THPStream_pynew checking the index
// (against c10::DeviceIndex's range and the backend's device count).
newfunc torch_stream_new = nullptr;

PyObject* torchStreamNewCheckingSpyreIndex(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
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
      if (overflow < 0 || (overflow == 0 && value < -1)) {
        PyErr_SetString(PyExc_ValueError,
                        negativeDeviceIndexMessage(py::str(index).cast<std::string>()).c_str());
        return nullptr;
      }
      if (overflow != 0 || value >= kMaxDevices) {  // the one out-of-range message
        try {
          if (overflow != 0) throwInvalidDeviceIndex(py::str(index).cast<std::string>());
          checkVisibleDevice(value);
        } catch (const c10::Error& e) {
          PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
          return nullptr;
        }
      }
    }
  }
  return torch_stream_new(type, args, kwargs);
}

}  // namespace

StreamKey key(const SpyreStream& stream) {
  return {stream.id(), static_cast<int>(stream.device_index())};
}

std::string negativeDeviceIndexMessage(const std::string& index) {
  return "Invalid device index " + index + ": expected -1 (the current device) or an index in [0, " +
         std::to_string(static_cast<int>(deviceCount())) + ")";
}

// -1 is the current device, as on CUDA; -2 and below name no device.
c10::DeviceIndex deviceArg(int64_t index) {
  if (index == -1) return -1;
  if (index < -1) throw py::value_error(negativeDeviceIndexMessage(std::to_string(index)));
  if (index >= kMaxDevices) checkVisibleDevice(index);  // raises: past every device
  return static_cast<c10::DeviceIndex>(index);
}

// A device string's index is checked before c10::Device narrows it
// ("spyre:300" would name spyre:44, "spyre:256" spyre:0).
c10::Device parseDeviceString(const std::string& text) {
  const size_t colon = text.rfind(':');
  const std::string digits = colon == std::string::npos ? "" : text.substr(colon + 1);
  // Only digits c10::Device accepts (no leading zero, fits int64): it
  // rejects the others with its own message.
  if (!digits.empty() && digits.size() <= 18 && (digits[0] != '0' || digits.size() == 1) &&
      digits.find_first_not_of("0123456789") == std::string::npos) {
    const int64_t index = std::stoll(digits);
    if (index >= kMaxDevices) checkVisibleDevice(index);  // raises
  }
  return c10::Device(text);
}

// The shared object that holds a function's code ("" if none is known).
std::string libraryOf(void* function) {
  Dl_info info{};
  if (dladdr(function, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::string checkTorchStreamIndices() {
  if (torch_stream_new != nullptr || THPStreamClass->tp_new == &torchStreamNewCheckingSpyreIndex) return "";
  const std::string library = libraryOf(reinterpret_cast<void*>(THPStreamClass->tp_new));
  const size_t slash = library.rfind('/');
  if (library.compare(slash == std::string::npos ? 0 : slash + 1, std::string::npos,
                      "libtorch_python.so") != 0) {
    return "spyre: torch.Stream's constructor is not torch's own (its code is in " +
           (library.empty() ? std::string("an unknown place") : library) +
           "): spyre leaves it alone, and torch.Stream(stream_id, device_index, device_type) does "
           "not check a spyre device index";
  }
  torch_stream_new = THPStreamClass->tp_new;
  THPStreamClass->tp_new = &torchStreamNewCheckingSpyreIndex;
  return "";
}

c10::DeviceIndex deviceFromPython(const py::handle& device) {
  if (device.is_none()) return -1;
  if (PyLong_Check(device.ptr()) && !PyBool_Check(device.ptr())) {
    return deviceArg(device.cast<int64_t>());
  }
  std::optional<c10::Device> parsed;
  if (THPDevice_Check(device.ptr())) {
    parsed = reinterpret_cast<THPDevice*>(device.ptr())->device;
  } else if (py::isinstance<py::str>(device)) {
    parsed = parseDeviceString(device.cast<std::string>());
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

}  // namespace spyre::python
