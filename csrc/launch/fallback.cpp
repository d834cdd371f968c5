// Registration of the launch path (launch/launch.h): the boxed fallback for
// every op without a spyre kernel, and convolution, which ATen routes to
// *_overrideable for devices it does not know.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "launch/launch.h"

namespace spyre {
namespace {

c10::OperatorHandle opHandle(const char* name, const char* overload) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

// Spyre runs an op with its CPU kernel, so an op CPU has no kernel for has
// none on spyre either; say so naming spyre (the dispatcher, asked for CPU's
// kernel, would name the CPU backend), before any stream is waited for.
void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  TORCH_CHECK_NOT_IMPLEMENTED(op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU),
                              "Could not run '", op.schema().operator_name(),
                              "' with arguments from the 'spyre' backend: spyre runs operators "
                              "with their CPU kernels, and this one has no CPU kernel");
  launchOp(op, stack);
}

// Torch routes a spyre convolution to its "overrideable" backend, whose
// outputs are contiguous whatever the layout of the input and weight: that is
// what torch's fake kernel says of spyre (torch.compile plans with it). CPU's
// kernel would return channels-last outputs for channels-last arguments, so
// those arguments are made contiguous (stream-ordered copies) first.
void makeContiguous(torch::jit::Stack* stack, size_t first, std::initializer_list<size_t> args) {
  for (const size_t arg : args) {
    c10::IValue& v = (*stack)[first + arg];
    if (v.isTensor() && v.toTensor().defined() && !v.toTensor().is_contiguous()) {
      v = v.toTensor().contiguous();
    }
  }
}

// convolution_overrideable has aten::convolution's arguments: infer shapes and
// compute with it.
void convolutionOverrideable(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::OperatorHandle convolution = opHandle("aten::convolution", "");
  makeContiguous(stack, stack->size() - op.schema().arguments().size(), {0, 1});  // input, weight
  launchOpComputedBy(op, convolution, stack);
}

// convolution_backward_overrideable lacks convolution_backward's bias_sizes
// (the bias has one entry per output channel): insert it and compute with it.
void convolutionBackwardOverrideable(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  static const c10::OperatorHandle backward = opHandle("aten::convolution_backward", "");
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  makeContiguous(stack, first, {0, 1, 2});  // grad_output, input, weight
  const at::Tensor& grad_output = (*stack)[first].toTensor();
  const std::vector<int64_t> bias_sizes{grad_output.size(1)};
  stack->insert(stack->begin() + static_cast<std::ptrdiff_t>(first + 3), c10::IValue(bias_sizes));
  launchOp(backward, stack);
}

}  // namespace

// Structured ops reach a new backend through their
// CompositeExplicitAutogradNonFunctional kernels, which allocate the outputs
// and call the out= variant; a few ops with a CPU kernel decompose for other
// backends (CompositeExplicitAutograd), with other numerics than CPU. Taking
// the functional and in-place forms directly skips that detour (one dispatch
// and one shape inference fewer) and sees the op the user called: some out=
// variants (mse_loss) use `out` as scratch space and warn where the functional
// op does not. Called once the library's static registrations are done
// (module init).
void registerFunctionalForms() {
  static auto* library = new torch::Library(torch::Library::IMPL, "aten",
                                            c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const c10::OperatorName& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) continue;
    const std::optional<c10::OperatorHandle> op = dispatcher.findOp(name);
    if (!op || !op->hasSchema() || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
      continue;
    }
    const bool structured =
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
    // A CPU kernel next to a decomposition for other backends (native_layer_norm,
    // native_group_norm, addr, ...): run CPU's kernel, for CPU's numerics.
    const bool decomposed =
        op->hasKernelForDispatchKey(c10::DispatchKey::CPU) &&
        op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd);
    if (!structured && !decomposed) {
      continue;
    }
    std::string qualified = name.name.substr(6);
    if (!name.overload_name.empty()) qualified += "." + name.overload_name;
    library->impl(qualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&fallback>());
  }
}

namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolutionOverrideable>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&convolutionBackwardOverrideable>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

}  // namespace
}  // namespace spyre
