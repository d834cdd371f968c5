// Quantized tensors are not spyre dtypes (dtypes.h): the ops that would make
// one on spyre refuse at the call, naming the op and what spyre holds. Without
// these kernels, quantize_per_tensor of a spyre tensor computed on the host and
// then failed to copy its quantized result back ("Copying from quantized Tensor
// to non-quantized Tensor is not allowed"), and .to("spyre") of a quantized CPU
// tensor reached ATen's "Could not run 'aten::empty_quantized'".
// dequantize() of a (float) spyre tensor works, as on CPU: it returns a float tensor.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace spyre {
namespace {

void refuseQuantized(const c10::OperatorHandle& op, torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_TYPE(false, "spyre does not support quantized tensors (", op.schema().name(),
                   "): spyre tensors hold the dtypes in torch.accelerator.get_device_capability()"
                   "['supported_dtypes'], none of them quantized; quantize and dequantize on the CPU");
}

constexpr const char* kMakesQuantizedTensor[] = {
    "quantize_per_tensor",
    "quantize_per_tensor.tensor_qparams",
    "quantize_per_tensor.tensors",
    "quantize_per_channel",
    "quantize_per_tensor_dynamic",
    "_make_per_tensor_quantized_tensor",
    "_make_per_channel_quantized_tensor",
};

constexpr const char* kQuantizedFactories[] = {
    "empty_quantized",
    "_empty_affine_quantized",
    "_empty_per_channel_affine_quantized",
};

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kMakesQuantizedTensor) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuseQuantized>());
  }
  for (const char* name : kQuantizedFactories) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuseQuantized>());
  }
}

// A quantized CPU tensor copied to spyre asks for a QuantizedPrivateUse1 tensor.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  for (const char* name : kQuantizedFactories) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&refuseQuantized>());
  }
}

}  // namespace
}  // namespace spyre
