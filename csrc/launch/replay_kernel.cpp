#include "launch/replay_kernel.h"

#include <atomic>
#include <string_view>

#include <ATen/ops/add_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/sub_native.h>

namespace spyre::launch {

namespace {

// CPU's structured kernel class of an op (ATen/ops/<op>_native.h: the
// TensorIterator its meta function builds, and its impl), with the node's
// output for its output: meta() builds the iterator once, at capture; each
// replay calls impl(), which runs the kernel's loop over it. The generated
// out= wrapper does the same per call, resizing or proxying an output that
// does not fit: here one that does not fit is refused (the boxed call does
// that part).
template <class Structured>
class OverNodeOutput final : public Structured {
 public:
  explicit OverNodeOutput(at::Tensor out) : out_(std::move(out)) {}

  const at::Tensor& maybe_get_output(int64_t /*output_idx*/) override { return out_; }

  void set_output_raw_strided(int64_t output_idx, c10::IntArrayRef sizes,
                              c10::IntArrayRef strides, c10::TensorOptions options) override {
    TORCH_CHECK(out_.sizes().equals(sizes) && options.dtype() == out_.dtype(),
                "the node's output does not fit");
    Structured::set_output_raw_strided(output_idx, sizes, strides, options);
  }

  const at::Tensor& out() const { return out_; }

 private:
  at::Tensor out_;
};

std::atomic<int64_t> g_resolved{0};

bool isPlainCpuTensor(const c10::IValue& v) {
  if (!v.isTensor()) return false;
  const at::Tensor& t = v.toTensor();
  return t.defined() && t.device().is_cpu() && t.layout() == c10::kStrided && !t.is_conj() &&
         !t.is_neg();
}

// add/sub(self, other, alpha) and mul/div(self, other): their iterator reads
// and writes the tensors in place, with no operand converted (a conversion
// is a copy made by meta(), which a replay would not refresh).
template <class Structured, bool kHasAlpha>
class BinaryReplay final : public ReplayKernel {
 public:
  BinaryReplay(at::Tensor self, at::Tensor other, c10::Scalar alpha, at::Tensor out)
      : self_(std::move(self)), other_(std::move(other)), alpha_(std::move(alpha)),
        op_(std::move(out)) {
    if constexpr (kHasAlpha) {
      op_.meta(self_, other_, alpha_);
    } else {
      op_.meta(self_, other_);
    }
  }

  bool convertsNothing() const {
    const c10::ScalarType dtype = op_.out().scalar_type();
    return self_.scalar_type() == dtype && other_.scalar_type() == dtype &&
           op_.common_dtype() == dtype && op_.data_ptr(0) == op_.out().data_ptr();
  }

  void run() override {
    if constexpr (kHasAlpha) {
      op_.impl(self_, other_, alpha_, op_.out());
    } else {
      op_.impl(self_, other_, op_.out());
    }
  }

 private:
  // The iterator borrows these (meta's build_borrowing_binary_op): declared
  // before it, they outlive it.
  at::Tensor self_;
  at::Tensor other_;
  c10::Scalar alpha_;
  OverNodeOutput<Structured> op_;
};

template <class Structured, bool kHasAlpha>
std::unique_ptr<ReplayKernel> binaryReplay(const at::Tensor& self, const at::Tensor& other,
                                           const c10::Scalar& alpha, const at::Tensor& out) {
  auto kernel = std::make_unique<BinaryReplay<Structured, kHasAlpha>>(self, other, alpha, out);
  if (!kernel->convertsNothing()) return nullptr;
  g_resolved.fetch_add(1, std::memory_order_relaxed);
  return kernel;
}

}  // namespace

std::unique_ptr<ReplayKernel> resolveReplayKernel(const c10::OperatorHandle& op,
                                                  const torch::jit::Stack& stack) {
  const c10::OperatorName& name = op.operator_name();
  const std::string_view overload = name.overload_name;
  std::string_view base = name.name;
  const bool in_place = overload == "Tensor" && !base.empty() && base.back() == '_';
  if (!in_place && overload != "out") return nullptr;
  if (in_place) base.remove_suffix(1);
  const bool has_alpha = base == "aten::add" || base == "aten::sub";
  if (!has_alpha && base != "aten::mul" && base != "aten::div") return nullptr;
  // (self, other[, alpha][, out])
  const size_t arguments = has_alpha ? 3 : 2;
  if (stack.size() != arguments + (in_place ? 0 : 1)) return nullptr;
  const c10::IValue& out = in_place ? stack[0] : stack.back();
  if (!isPlainCpuTensor(stack[0]) || !isPlainCpuTensor(stack[1]) || !isPlainCpuTensor(out) ||
      (has_alpha && !stack[2].isScalar())) {
    return nullptr;
  }
  const at::Tensor& self = stack[0].toTensor();
  const at::Tensor& other = stack[1].toTensor();
  const c10::Scalar alpha = has_alpha ? stack[2].toScalar() : c10::Scalar(1);
  try {
    if (base == "aten::add") {
      return binaryReplay<at::native::structured_ufunc_add_CPU, true>(self, other, alpha,
                                                                      out.toTensor());
    }
    if (base == "aten::sub") {
      return binaryReplay<at::native::structured_sub_out, true>(self, other, alpha,
                                                                out.toTensor());
    }
    if (base == "aten::mul") {
      return binaryReplay<at::native::structured_mul_out, false>(self, other, alpha,
                                                                 out.toTensor());
    }
    return binaryReplay<at::native::structured_div_out, false>(self, other, alpha,
                                                               out.toTensor());
  } catch (const c10::Error&) {
    return nullptr;  // the boxed call raises it at the replay, as at the capture
  }
}

int64_t replayKernelsResolved() { return g_resolved.load(std::memory_order_relaxed); }

}  // namespace spyre::launch
