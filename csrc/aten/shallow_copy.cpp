// Whether one tensor's TensorImpl may take over another's storage and metadata
// (`param.data = t`, and Module.to(), which moves parameters that way and so
// keeps their identity). c10's TensorImpl::has_compatible_shallow_copy_type
// answers yes for dense tensors of the backends it lists (CPU, CUDA, XPU, ...)
// and leaves PrivateUse1 to the backend's kernel of
// aten::_has_compatible_shallow_copy_type. Spyre's dense tensors are strided
// tensors like CPU's, so dense CPU and spyre tensors are compatible in either
// direction, as CPU and CUDA are.
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

namespace spyre {
namespace {

bool denseCpuOrSpyre(c10::DispatchKeySet keys) {
  constexpr auto backends = c10::DispatchKeySet(
      {c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(backends);
}

bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (denseCpuOrSpyre(self.key_set()) && denseCpuOrSpyre(from.key_set()));
}

// The op is CompositeImplicitAutograd: a call with a spyre tensor dispatches to
// AutogradPrivateUse1 first, where the composite kernel would answer.
TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(hasCompatibleShallowCopyType));
}

}  // namespace
}  // namespace spyre
