// torch_spyre._C's entry point: registers what needs Python once and calls
// the binding groups (python/bindings.h, one file each). The only translation
// unit that includes torch/extension.h (it alone costs ~20 s to compile).
#include <torch/csrc/utils/device_lazy_init.h>
#include <torch/extension.h>

#include "aten/launch.h"
#include "python/bindings.h"
#include "runtime/runtime.h"

PYBIND11_MODULE(_C, m) {
  using namespace spyre::python;  // NOLINT: every binding group
  m.doc() = "torch_spyre native extension: Spyre runtime, streams and tensors";
  // Tell torch the device is initialized even when the runtime was started
  // from C++ (e.g. by torch.Stream()), so torch.accelerator.synchronize()
  // is not skipped as "device not initialized".
  spyre::setRuntimeStartedCallback(
      [] { torch::utils::set_requires_device_init(c10::DeviceType::PrivateUse1, false); });
  installHostWaitHooks();
  spyre::registerFunctionalForms();
  checkTorchStreamIndices();
  bindRuntime(m);
  bindStreams(m);
  bindEvents(m);
  bindErrors(m);
  bindGenerators(m);
  bindDeviceProperties(m);
  bindHostMemory(m);
  bindCompiledKernels(m);
}
