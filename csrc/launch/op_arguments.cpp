#include "launch/op_arguments.h"

#include <optional>
#include <string>

#include "runtime/runtime.h"

namespace spyre::launch {
namespace {

[[noreturn]] void throwDeviceMismatch(c10::Device spyre, const at::Tensor& other,
                                      const c10::OperatorHandle& op) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", spyre, " and ", other.device(), "! (in ",
              op.operator_name(), ")");
}

// Index ops take CPU index tensors (CUDA moves them to the device too).
bool takesHostIndices(const c10::OperatorHandle& op, const c10::Argument& argument) {
  if (argument.name() != "indices") return false;
  const std::string& name = op.schema().name();
  return name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
         name == "aten::_index_put_impl_";
}

}  // namespace

bool holdsTensors(const c10::IValue& value) {
  if (value.isTensor() || value.isTensorList()) return true;
  if (!value.isList()) return false;
  for (const c10::IValue& element : value.toListRef()) {
    if (element.isTensor()) return true;
  }
  return false;
}

// CUDA's rule: every tensor on the op's device, except 0-dim CPU tensors
// (scalars). Returns the op's device index: that of its spyre tensors, or of a
// spyre device argument (factories), or the current device.
CheckedDevice checkDevices(const c10::OperatorHandle& op, Stack* stack, size_t first) {
  const auto& arguments = op.schema().arguments();
  std::optional<c10::Device> spyre;  // a copy: list elements are not stable references
  std::optional<c10::DeviceIndex> device;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isDevice() && value.toDevice().is_privateuseone() && !device) {
      device = ensureDevice(value.toDevice().index());
    }
    if (takesHostIndices(op, arguments[i]) && value.isList()) {
      // Move host indices to the device first (a copy in stream order).
      c10::List<std::optional<at::Tensor>> indices = value.to<c10::List<std::optional<at::Tensor>>>();
      bool moved = false;
      for (size_t k = 0; k < indices.size(); ++k) {
        std::optional<at::Tensor> index = indices.get(k);
        if (index && index->defined() && index->is_cpu()) {
          indices.set(k, index->to(c10::Device(c10::DeviceType::PrivateUse1, ensureDevice(-1))));
          moved = true;
        }
      }
      if (moved) value = indices;
    }
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    forEachTensor((*stack)[first + i], [&](const at::Tensor& t) {
      if (isSpyre(t) && !spyre) spyre = t.device();
    });
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    forEachTensor((*stack)[first + i], [&](const at::Tensor& t) {
      if (!t.defined() || (t.is_cpu() && t.dim() == 0)) return;
      if (!spyre) {
        // No spyre tensor: a factory with device="spyre" and host tensor inputs.
        if (t.is_cpu()) return;
        TORCH_CHECK(false, "spyre: unexpected ", t.device(), " tensor argument for ",
                    op.operator_name());
      }
      if (t.device() != *spyre) throwDeviceMismatch(*spyre, t, op);
    });
  }
  if (spyre) return checkDevice(spyre->index());
  return checkDevice(device ? *device : -1);
}

void replaceArgsWithReturns(Stack* stack, size_t num_args, std::vector<c10::IValue> returns) {
  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : returns) stack->push_back(std::move(r));
}
}  // namespace spyre::launch
