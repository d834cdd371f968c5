// torch.compile's kernels (python/bindings.h, aten/compiled_kernel.h).
#include <cstring>
#include <string>

#include <torch/csrc/autograd/python_variable.h>

#include "aten/compiled_kernel.h"
#include "python/bindings.h"

namespace spyre::python {

// torch.compile's kernels (torch_spyre/_compile): called with the
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
        CompiledKernel::Arguments launch(kinds.size());
        CompiledKernel::Slots& slots = launch.slots;
        for (size_t i = 0; i < kinds.size(); ++i) {
          const py::handle arg = args[i];
          switch (kinds[i]) {
            case 'p':
            case 'r': {
              TORCH_CHECK_TYPE(THPVariable_Check(arg.ptr()), "compiled kernel ", kernel.name(),
                               ": argument ", i, " must be a tensor, got ",
                               py::str(py::type::of(arg)).cast<std::string>());
              kernel.setTensor(launch, i, THPVariable_Unpack(arg.ptr()), stream);
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
        kernel.launch(stream, std::move(launch));
      });
}

}  // namespace spyre::python
