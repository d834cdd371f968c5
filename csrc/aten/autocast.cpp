// torch.autocast("spyre"): CUDA's op-level casting policy for the
// AutocastPrivateUse1 key. The op lists and wrappers are ATen's own
// (ATen/autocast_mode.h, the lists CUDA and XPU register), so spyre follows
// torch's policy as it changes. torch registers nothing for this key, not even
// the fallthrough: without it every op under spyre autocast fails.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace spyre {
namespace {

using namespace at;  // the macros' signatures name Tensor, Scalar, ... unqualified

// CUDA's message (autocast_mode.cpp keeps its function file-local).
Tensor binaryCrossEntropyBanned(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits "
              "are\n"
              "safe to autocast.");
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define SPYRE_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(SPYRE_LOWER_PRECISION_FP)
#undef SPYRE_LOWER_PRECISION_FP

#define SPYRE_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(SPYRE_FP32)
#undef SPYRE_FP32

#define SPYRE_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(SPYRE_FP32_SET_OPT_DTYPE)
#undef SPYRE_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define SPYRE_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(SPYRE_PROMOTE)
#undef SPYRE_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binaryCrossEntropyBanned));
}

}  // namespace
}  // namespace spyre
