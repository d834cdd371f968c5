// Meta kernels written here (meta_rules.h). Each mirrors the checks and the
// allocations of the op's CPU kernel in ATen/native (named in its comment).
#include "launch/meta_rules.h"

#include <array>
#include <optional>
#include <vector>

#include <ATen/MemoryOverlap.h>
#include <ATen/Operators.h>
#include <ATen/TensorIterator.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/MetaFunctions.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/result_type.h>

namespace spyre {
namespace {

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

// where.self (TensorCompare.cpp, where / where_self_out): the result type of
// self and other, laid out by a TensorIterator over condition, self, other.
// A uint8 condition (deprecated: CPU warns) is left to the CPU kernel.
at::Tensor& whereOutMeta(const at::Tensor& condition, const at::Tensor& self,
                         const at::Tensor& other, at::Tensor& out) {
  const at::ScalarType result_type = at::result_type(self, other);
  TORCH_CHECK(out.scalar_type() == result_type, "Expected out type to be ", result_type,
              " but got ", out.scalar_type());
  TORCH_CHECK(condition.scalar_type() == at::kBool,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              condition.scalar_type());
  const at::Tensor self_ = self.scalar_type() == result_type ? self : self.to(result_type);
  const at::Tensor other_ = other.scalar_type() == result_type ? other : other.to(result_type);
  at::TensorIteratorConfig()
      .check_all_same_dtype(false)
      .add_output(out)
      .add_const_input(condition)
      .add_const_input(self_)
      .add_const_input(other_)
      .build();
  return out;
}

at::Tensor whereMeta(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)));
  whereOutMeta(condition, self, other, out);
  return out;
}

// hardtanh (Activation.cpp): empty_like(self), then clamp_out into it. Bool,
// uint8 and complex inputs are left to the CPU kernel (it refuses them, or
// refuses some bounds).
at::Tensor hardtanhMeta(const at::Tensor& self, const at::Scalar& min, const at::Scalar& max) {
  const at::ScalarType type = self.scalar_type();
  TORCH_CHECK(type != at::kBool && type != at::kByte && !at::isComplexType(type),
              "hardtanh: ", type, " is left to the CPU kernel");
  at::Tensor result = at::empty_like(self);
  at::meta::clamp_out(result, self, min, max);
  return result;
}

// flip (TensorTransformations.cpp): the dims wrapped and distinct, the result
// empty_like(self) in self's memory format.
at::Tensor flipMeta(const at::Tensor& self, at::IntArrayRef dims) {
  at::dim_list_to_bitset(dims, self.dim());
  return at::empty_like(self, at::MemoryFormat::Preserve);
}

// dot (Blas.cpp, dot_check): two 1-D tensors of one dtype and length; a
// 0-dim result. Bool is left to the CPU kernel (it has none).
at::Tensor dotMeta(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(),
              "D and ", other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(),
              "dot : expected both vectors to have same dtype, but found ", self.scalar_type(),
              " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [",
              self.numel(), "] and src [", other.numel(),
              "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
  TORCH_CHECK(self.scalar_type() != at::kBool, "dot: Bool is left to the CPU kernel");
  return at::empty({}, self.options());
}

// abs.out (UnaryOps.cpp): a unary TensorIterator into the result. Complex
// (a real result through a complex temporary) and bool inputs are left to
// the CPU kernel.
at::Tensor& absOutMeta(const at::Tensor& self, at::Tensor& result) {
  TORCH_CHECK(!self.is_complex() && self.scalar_type() != at::kBool,
              "abs: ", self.scalar_type(), " is left to the CPU kernel");
  at::TensorIterator::unary_op(result, self);
  return result;
}

// var / std / var_mean / std_mean with a correction (ReduceOps.cpp,
// std_var_out): floating or complex inputs; contiguous results of the
// reduced shape, real-valued for the variance, self's dtype for the mean.
at::Tensor reductionResult(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                           at::ScalarType dtype) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "std and var only support floating point and complex dtypes");
  const auto mask = at::native::make_dim_mask(dim, self.dim());
  return at::empty(at::native::shape_from_dim_mask(self, mask, keepdim), self.options().dtype(dtype));
}

at::Tensor varMeta(const at::Tensor& self, at::OptionalIntArrayRef dim,
                   const std::optional<at::Scalar>& /*correction*/, bool keepdim) {
  return reductionResult(self, dim, keepdim, c10::toRealValueType(self.scalar_type()));
}

std::tuple<at::Tensor, at::Tensor> varMeanMeta(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                               const std::optional<at::Scalar>& correction,
                                               bool keepdim) {
  return {varMeta(self, dim, correction, keepdim),
          reductionResult(self, dim, keepdim, self.scalar_type())};
}

// native_batch_norm (Normalization.cpp, batch_norm_cpu): the output like the
// input, the saved statistics of length C (empty in evaluation), float for a
// reduced-precision input with float parameters. Only inputs and parameters
// that are all contiguous (in the input's own memory format) are inferred
// here; the others are left to the CPU kernel.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batchNormMeta(
    const at::Tensor& input, const std::optional<at::Tensor>& weight_opt,
    const std::optional<at::Tensor>& bias_opt, const std::optional<at::Tensor>& running_mean_opt,
    const std::optional<at::Tensor>& running_var_opt, bool training, double /*momentum*/,
    double /*eps*/) {
  const at::Tensor weight = weight_opt.value_or(at::Tensor());
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const at::Tensor running_mean = running_mean_opt.value_or(at::Tensor());
  const at::Tensor running_var = running_var_opt.value_or(at::Tensor());
  TORCH_CHECK(input.dim() >= 2 && at::isFloatingType(input.scalar_type()),
              "native_batch_norm: this input is left to the CPU kernel");
  TORCH_CHECK(training || (running_mean.defined() && running_var.defined()),
              "native_batch_norm: evaluation without running statistics is left to the CPU kernel");
  const int64_t channels = input.size(1);
  const bool mixed_type = at::native::is_mixed_type(input, weight, bias, running_mean, running_var);
  if (mixed_type) {
    at::native::check_mixed_data_type(input, weight, bias, running_mean, running_var);
  }
  for (const at::Tensor* param : {&weight, &bias, &running_mean, &running_var}) {
    if (!param->defined()) continue;
    TORCH_CHECK(param->dim() == 1 && param->numel() == channels && param->is_contiguous() &&
                    (mixed_type || param->scalar_type() == input.scalar_type()),
                "native_batch_norm: these parameters are left to the CPU kernel");
  }
  const at::MemoryFormat format = input.is_contiguous() ? at::MemoryFormat::Contiguous
      : input.is_contiguous(at::MemoryFormat::ChannelsLast) ? at::MemoryFormat::ChannelsLast
      : input.is_contiguous(at::MemoryFormat::ChannelsLast3d) ? at::MemoryFormat::ChannelsLast3d
      : at::MemoryFormat::Preserve;
  TORCH_CHECK(format != at::MemoryFormat::Preserve,
              "native_batch_norm: a non-contiguous input is left to the CPU kernel");
  const auto stats = input.options().dtype(mixed_type ? at::kFloat : input.scalar_type());
  const int64_t length = training ? channels : 0;
  return {at::empty_like(input, format), at::empty({length}, stats), at::empty({length}, stats)};
}

// Convolution (Convolution.cpp, at::convolution on CPU): spyre's fallback
// hands it contiguous inputs and weights (fallback.cpp), for which CPU's
// kernels give a contiguous output of the usual sizes. Only the common case is
// inferred here: float inputs of one dtype, 1 to 3 spatial dimensions, the
// parameters' lists of one entry or one per spatial dimension, positive output
// sizes. The rest is left to the CPU kernel, and so is any refusal the CPU
// kernel would make that is not checked here (a first call runs the kernel on
// scratch data before queueing: it raises there).
struct ConvGeometry {
  std::vector<int64_t> stride, padding, dilation, output_padding;
};

std::vector<int64_t> convParam(c10::SymIntArrayRef values, size_t spatial, const char* what) {
  TORCH_CHECK(values.size() == 1 || values.size() == spatial, "convolution: this ", what,
              " is left to the CPU kernel");
  std::vector<int64_t> out;
  for (size_t d = 0; d < spatial; ++d) {
    out.push_back(values[values.size() == 1 ? 0 : d].expect_int());
  }
  return out;
}

ConvGeometry convGeometry(const at::Tensor& input, const at::Tensor& weight,
                          const at::Tensor& bias, c10::SymIntArrayRef stride,
                          c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                          c10::SymIntArrayRef output_padding, int64_t groups) {
  const int64_t dims = weight.dim();
  TORCH_CHECK(dims >= 3 && dims <= 5 && (input.dim() == dims || input.dim() == dims - 1) &&
                  at::isFloatingType(input.scalar_type()) &&
                  weight.scalar_type() == input.scalar_type() &&
                  (!bias.defined() || bias.scalar_type() == input.scalar_type()) && groups > 0 &&
                  input.is_contiguous() && weight.is_contiguous(),
              "convolution: these arguments are left to the CPU kernel");
  const size_t spatial = static_cast<size_t>(dims - 2);
  return {convParam(stride, spatial, "stride"), convParam(padding, spatial, "padding"),
          convParam(dilation, spatial, "dilation"),
          convParam(output_padding, spatial, "output_padding")};
}

at::Tensor convolutionMeta(const at::Tensor& input, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias_opt, c10::SymIntArrayRef stride,
                           c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
                           bool transposed, c10::SymIntArrayRef output_padding,
                           c10::SymInt groups_sym) {
  const at::Tensor bias = bias_opt.value_or(at::Tensor());
  const int64_t groups = groups_sym.expect_int();
  const ConvGeometry g =
      convGeometry(input, weight, bias, stride, padding, dilation, output_padding, groups);
  const bool batched = input.dim() == weight.dim();
  const int64_t channel_dim = batched ? 1 : 0;
  const int64_t in_channels = input.size(channel_dim);
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  TORCH_CHECK(in_channels == (transposed ? weight.size(0) : weight.size(1) * groups) &&
                  (!transposed || weight.size(0) % groups == 0) && out_channels % groups == 0 &&
                  (!bias.defined() || (bias.dim() == 1 && bias.numel() == out_channels)),
              "convolution: these shapes are left to the CPU kernel");
  std::vector<int64_t> sizes;
  if (batched) sizes.push_back(input.size(0));
  sizes.push_back(out_channels);
  for (size_t d = 0; d < g.stride.size(); ++d) {
    const int64_t in = input.size(channel_dim + 1 + static_cast<int64_t>(d));
    const int64_t kernel = weight.size(2 + static_cast<int64_t>(d));
    const int64_t span = g.dilation[d] * (kernel - 1);
    const int64_t out = transposed
        ? (in - 1) * g.stride[d] - 2 * g.padding[d] + span + g.output_padding[d] + 1
        : (in + 2 * g.padding[d] - span - 1) / g.stride[d] + 1;
    // CPU's checks (Convolution.cpp, check_shape_forward): a call refused there
    // must not be queued, since a verified signature gets no scratch run.
    const bool output_padding_ok =
        transposed ? g.output_padding[d] >= 0 &&
                         (g.output_padding[d] < g.stride[d] || g.output_padding[d] < g.dilation[d])
                   : g.output_padding[d] == 0;
    TORCH_CHECK(g.stride[d] > 0 && g.dilation[d] > 0 && g.padding[d] >= 0 && output_padding_ok &&
                    out > 0 && (transposed || in + 2 * g.padding[d] - span - 1 >= 0),
                "convolution: these sizes are left to the CPU kernel");
    sizes.push_back(out);
  }
  return at::empty(sizes, input.options());
}

// convolution_backward (Convolution.cpp): the gradients of the input, weight
// and bias asked for, each contiguous, like what it differentiates.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackwardMeta(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::OptionalSymIntArrayRef bias_sizes, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
    c10::SymIntArrayRef output_padding, c10::SymInt groups, std::array<bool, 3> output_mask) {
  const at::Tensor expected = convolutionMeta(input, weight, std::nullopt, stride, padding,
                                              dilation, transposed, output_padding, groups);
  TORCH_CHECK(grad_output.sizes() == expected.sizes() &&
                  grad_output.scalar_type() == input.scalar_type() && grad_output.is_contiguous(),
              "convolution_backward: this gradient is left to the CPU kernel");
  at::Tensor grad_bias;
  if (output_mask[2]) {
    TORCH_CHECK(bias_sizes.has_value(), "convolution_backward: no bias sizes");
    grad_bias = at::empty(C10_AS_INTARRAYREF_SLOW(*bias_sizes), input.options());
  }
  return {output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor(),
          output_mask[1] ? at::empty(weight.sizes(), weight.options()) : at::Tensor(),
          grad_bias};
}

}  // namespace

void addMetaRules(const MetaRuleAdder& add) {
  // The ops struct's schema type checks each rule's signature.
#define META_RULE(ops, fn)                               \
  add(at::_ops::ops::name, at::_ops::ops::overload_name, \
      c10::KernelFunction::makeFromUnboxedRuntimeFunction(static_cast<at::_ops::ops::schema*>(&fn)));
  META_RULE(relu, reluMeta)
  META_RULE(relu_, reluMeta_)
  META_RULE(masked_fill__Scalar, maskedFillMeta_)
  META_RULE(masked_fill__Tensor, maskedFillTensorMeta_)
  META_RULE(native_layer_norm, layerNormMeta)
  META_RULE(native_layer_norm_backward, layerNormBackwardMeta)
  META_RULE(where_self, whereMeta)
  META_RULE(where_self_out, whereOutMeta)
  META_RULE(hardtanh, hardtanhMeta)
  META_RULE(flip, flipMeta)
  META_RULE(dot, dotMeta)
  META_RULE(abs_out, absOutMeta)
  META_RULE(var_correction, varMeta)
  META_RULE(std_correction, varMeta)
  META_RULE(var_mean_correction, varMeanMeta)
  META_RULE(std_mean_correction, varMeanMeta)
  META_RULE(native_batch_norm, batchNormMeta)
  META_RULE(convolution, convolutionMeta)
  META_RULE(convolution_backward, convolutionBackwardMeta)
#undef META_RULE
}

}  // namespace spyre
