// Which kernel scaled_dot_product_attention takes on spyre. ATen asks a
// per-device dispatch stub and, for a device without an entry, decomposes
// into the math path (bmm, a "safe" softmax that scans every row for -inf,
// bmm). Spyre answers as CPU does, since kernels run CPU's code on device
// memory: where CPU would take its flash-attention kernel, ATen calls
// _scaled_dot_product_flash_attention_for_cpu (and its backward), which the
// launch path queues on the current stream like any other op, and
// torch.compile keeps as one extern kernel, as it does on CPU. The choice
// honours the same switches (torch.nn.attention.sdpa_kernel, dropout, masks,
// dtypes, shapes) as CPU's.
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_cpu_dispatch.h>

namespace spyre {
namespace {

int64_t chooseFusedAttention(const at::Tensor& query, const at::Tensor& key,
                             const at::Tensor& value, const std::optional<at::Tensor>& attn_mask,
                             double dropout_p, bool is_causal, std::optional<double> scale,
                             bool enable_gqa) {
  return at::cpu::_fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                    enable_gqa);
}

}  // namespace
}  // namespace spyre

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &spyre::chooseFusedAttention)
}  // namespace at::native
