// torch_spyre._C's entry point: registers what needs Python once and calls
// the binding groups (python/bindings.h, one file each). The only translation
// unit that includes torch/extension.h, the costliest header to compile: every
// other unit includes only the headers it uses.
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/extension.h>

#include "launch/launch.h"
#include "launch/thread_mode.h"
#include "python/bindings.h"
#include "runtime/runtime.h"

namespace spyre::python {
namespace {

// spyreccl (torch_spyre/distributed): a failed collective fails its future
// in C++, as c10d's own backends do. Python's Future.set_exception completes
// it with the exception as its value, which c10d (DDP's reducer) takes for
// a result. Here, beside torch/extension.h, because pybind_utils.h is as heavy.
void bindFutures(py::module_& m) {
  m.def("_future_set_error", [](const std::shared_ptr<torch::jit::PythonFutureWrapper>& future,
                                const std::string& message) {
    future->fut->setError(std::make_exception_ptr(std::runtime_error(message)));
  });
}

}  // namespace
}  // namespace spyre::python

PYBIND11_MODULE(_C, m) {
  using namespace spyre::python;  // NOLINT: every binding group
  m.doc() = "torch_spyre native extension: Spyre runtime, streams and tensors";
  // Tell torch the device is initialized even when the runtime was started
  // from C++ (e.g. by torch.Stream()), so torch.accelerator.synchronize()
  // is not skipped as "device not initialized".
  spyre::setRuntimeStartedCallback(
      [] { torch::utils::set_requires_device_init(c10::DeviceType::PrivateUse1, false); });
  installHostWaitHooks();
  installDeviceFaultStack();
  spyre::registerFunctionalForms();
  // A borrowed dispatch key, registered only if nothing else claimed it (launch/thread_mode.h).
  const std::string key_taken = spyre::registerThreadModeKey();
  if (!key_taken.empty() && PyErr_WarnEx(PyExc_RuntimeWarning, key_taken.c_str(), 1) != 0) {
    throw py::error_already_set();
  }
  m.def("_thread_mode_key_owned", &spyre::threadModeKeyOwned);
  const std::string stream_new_unchecked = checkTorchStreamIndices();
  if (!stream_new_unchecked.empty() &&
      PyErr_WarnEx(PyExc_RuntimeWarning, stream_new_unchecked.c_str(), 1) != 0) {
    throw py::error_already_set();
  }
  bindRuntime(m);
  bindStreams(m);
  bindEvents(m);
  bindErrors(m);
  bindGenerators(m);
  bindDeviceProperties(m);
  bindHostMemory(m);
  bindMemoryHistory(m);
  bindCompiledKernels(m);
  bindCollectives(m);
  bindPeerAccessWindows(m);
  bindSanitizer(m);
  bindSyncDebug(m);
  bindGraphs(m);
  bindNumerics(m);
  bindFutures(m);
}
