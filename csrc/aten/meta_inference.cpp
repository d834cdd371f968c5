// C++ meta kernels for metadata inference (meta_inference.h).
//
// How the Meta dispatches are routed: callMeta includes a dispatch key that
// no tensor carries and that no op has a kernel for (TESTING_ONLY_GenericMode)
// in the thread-local dispatch state while the op runs on meta tensors, and
// registers one boxed fallback for that key. Every dispatch of the op, and of
// the ops its composite kernel calls, reaches the fallback first, which picks
// the C++ kernel; outside callMeta nothing ever reaches it.
#include "aten/meta_inference.h"

#include <unordered_map>

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace spyre {
namespace {

constexpr c10::DispatchKey kRoute = c10::DispatchKey::TESTING_ONLY_GenericMode;

// A backend key nothing registers for: its dispatch table entries are the
// ops' CompositeExplicitAutograd(NonFunctional) kernels.
constexpr c10::DispatchKey kComposite = c10::DispatchKey::PrivateUse3;

// relu has no C++ meta kernel (CPU's relu is clamp_min(self, 0)).
at::Tensor reluMeta(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::meta::clamp_min(self, 0);
}

at::Tensor& reluMeta_(at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  return at::meta::clamp_min_(self, 0);
}

// masked_fill_'s C++ meta kernel is not exported (nor are those of 18 other
// in-place ops, which keep the Python one). CPU's masked_fill__cpu checks
// these, then builds this TensorIterator (which checks the broadcast).
at::Tensor& maskedFillMeta_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& /*value*/) {
  TORCH_CHECK(mask.dtype() == at::ScalarType::Bool,
              "masked_fill_ only supports boolean masks, but got mask with dtype ", mask.dtype());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    TORCH_WARN(
        "Use of masked_fill_ on expanded tensors is deprecated. "
        "Please clone() the tensor before performing this operation. "
        "This also applies to advanced indexing e.g. tensor[mask] = scalar");
  }
  at::assert_no_partial_overlap(self, mask);
  at::TensorIteratorConfig()
      .set_check_mem_overlap(false)
      .check_all_same_dtype(false)
      .resize_outputs(false)
      .add_output(self)
      .add_const_input(mask)
      .build();
  return self;
}

at::Tensor& maskedFillTensorMeta_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return maskedFillMeta_(self, mask, at::Scalar(0));
}

// native_layer_norm and its backward have no C++ meta kernel; their
// CompositeExplicitAutograd kernels reach native_batch_norm, which has none
// either. These give what CPU's layer_norm_cpu and layer_norm_backward_cpu
// allocate (same checks, contiguous outputs, float statistics for a reduced
// float input with float parameters).
std::tuple<at::Tensor, at::Tensor, at::Tensor> layerNormMeta(
    const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    double /*eps*/) {
  const at::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const bool mixed_type = at::native::is_mixed_type(input, weight, bias);
  if (mixed_type) at::native::check_mixed_data_type(input, weight, bias);
  const int64_t m = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias).first;
  const auto stats = input.options().dtype(at::native::param_scalar_type(input, mixed_type));
  std::vector<int64_t> stat_shape(input.sizes().begin(), input.sizes().end());
  for (size_t i = stat_shape.size() - normalized_shape.size(); i < stat_shape.size(); ++i) {
    stat_shape[i] = 1;
  }
  return {at::empty(input.sizes(), input.options(), at::MemoryFormat::Contiguous),
          at::empty({m}, stats).view(stat_shape), at::empty({m}, stats).view(stat_shape)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layerNormBackwardMeta(
    const at::Tensor& /*grad_out*/, const at::Tensor& input, c10::SymIntArrayRef normalized_shape_sym,
    const at::Tensor& /*mean*/, const at::Tensor& /*rstd*/,
    const std::optional<at::Tensor>& weight_opt, const std::optional<at::Tensor>& bias_opt,
    std::array<bool, 3> grad_input_mask) {
  const at::IntArrayRef normalized_shape = C10_AS_INTARRAYREF_SLOW(normalized_shape_sym);
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  auto like = [](const at::Tensor& t) {
    return at::empty(t.sizes(), t.options(), at::MemoryFormat::Contiguous);
  };
  at::Tensor d_input, d_weight, d_bias;
  if (grad_input_mask[0]) d_input = like(input);
  if (grad_input_mask[1] && weight.defined()) d_weight = like(weight);
  if (grad_input_mask[2] && bias.defined()) d_bias = like(bias);
  return {d_input, d_weight, d_bias};
}

using Table = std::unordered_map<c10::OperatorName, c10::KernelFunction>;

const Table& cppMetaKernels() {
  static const Table* table = [] {
    auto* t = new Table();
    auto add = [t](const char* name, const char* overload, c10::KernelFunction kernel) {
      t->emplace(c10::OperatorName(name, overload), std::move(kernel));
    };
    // The ops struct's schema type picks the at::meta overload.
#define META_KERNEL(ops, fn)                                 \
  add(at::_ops::ops::name, at::_ops::ops::overload_name,     \
      c10::KernelFunction::makeFromUnboxedRuntimeFunction(   \
          static_cast<at::_ops::ops::schema*>(&at::meta::fn)));
#include "aten/meta_kernels.inc"
#undef META_KERNEL
    add("aten::relu", "", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&reluMeta));
    add("aten::relu_", "", c10::KernelFunction::makeFromUnboxedRuntimeFunction(&reluMeta_));
    add("aten::masked_fill_", "Scalar",
        c10::KernelFunction::makeFromUnboxedRuntimeFunction(
            static_cast<at::_ops::masked_fill__Scalar::schema*>(&maskedFillMeta_)));
    add("aten::masked_fill_", "Tensor",
        c10::KernelFunction::makeFromUnboxedRuntimeFunction(
            static_cast<at::_ops::masked_fill__Tensor::schema*>(&maskedFillTensorMeta_)));
    add("aten::native_layer_norm", "",
        c10::KernelFunction::makeFromUnboxedRuntimeFunction(
            static_cast<at::_ops::native_layer_norm::schema*>(&layerNormMeta)));
    add("aten::native_layer_norm_backward", "",
        c10::KernelFunction::makeFromUnboxedRuntimeFunction(
            static_cast<at::_ops::native_layer_norm_backward::schema*>(&layerNormBackwardMeta)));
    return t;
  }();
  return *table;
}

// Whether the op's Meta kernel is a Python one: the dispatcher keeps no other
// record of where a kernel comes from than its registration's debug string.
bool hasPythonMeta(const c10::OperatorHandle& op) {
  const std::string state = op.dumpState();
  const size_t at = state.find("\nMeta: registered at ");
  if (at == std::string::npos) return false;
  const size_t end = state.find(':', at + 21);
  return end != std::string::npos && state.compare(end - 3, 3, ".py") == 0;
}

struct Route {
  const c10::KernelFunction* kernel = nullptr;  // a C++ meta kernel
  bool composite = false;                       // else its composite kernel, if it has one
};

Route routeFor(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<c10::OperatorName, Route>();
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache->find(op.operator_name());
  if (found != cache->end()) return found->second;
  Route route;
  const Table& table = cppMetaKernels();
  auto kernel = table.find(op.operator_name());
  if (kernel != table.end()) {
    route.kernel = &kernel->second;
  } else if (hasPythonMeta(op)) {
    route.composite =
        op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  }
  cache->emplace(op.operator_name(), route);
  return route;
}

void routeMeta(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKeySet below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kRoute);
  const Route route = routeFor(op);
  if (route.kernel != nullptr) {
    route.kernel->callBoxed(op, below, stack);
  } else if (route.composite) {
    op.redispatchBoxed(c10::DispatchKeySet(kComposite), stack);
  } else {
    op.redispatchBoxed(below, stack);  // the Meta kernel: C++, or Python when it is the only one
  }
}

}  // namespace

void callMeta(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  const c10::impl::IncludeDispatchKeyGuard route(kRoute);
  op.callBoxed(stack);
}

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&routeMeta>());
}

}  // namespace spyre
