#include "launch/work_cost.h"

#include <algorithm>
#include <optional>
#include <vector>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <flex/card.hpp>

namespace spyre::launch {
namespace {

using Tensors = c10::SmallVector<const at::Tensor*, 4>;

void collect(const c10::IValue& v, Tensors& out) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) out.push_back(&v.toTensor());
  } else if (v.isTensorList() || v.isList()) {
    for (const c10::IValue& e : v.toListRef()) collect(e, out);
  }
}

uint64_t bytesOf(const at::Tensor& t) {
  return static_cast<uint64_t>(t.numel()) * t.element_size();
}

// The bytes a kernel reads from `t`: an expanded dim (stride 0) is read once.
uint64_t distinctBytesOf(const at::Tensor& t) {
  uint64_t elements = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) != 0 || t.size(d) == 0) elements *= static_cast<uint64_t>(t.size(d));
  }
  return elements * t.element_size();
}

// A batched operand that is one matrix expanded over the batch (a projection's weight).
bool sharedOverBatch(const at::Tensor& t) {
  return t.dim() == 3 && t.size(0) > 1 && t.stride(0) == 0;
}

// aten::addmm -> addmm; _foo.out has its overload elsewhere in the schema.
std::string_view baseName(const c10::FunctionSchema& schema) {
  std::string_view name = schema.name();
  const size_t colon = name.rfind("::");
  if (colon != std::string_view::npos) name.remove_prefix(colon + 2);
  if (!name.empty() && name.back() == '_') name.remove_suffix(1);  // in place
  return name;
}

bool isOneOf(std::string_view name, c10::ArrayRef<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Matmul-class ops whose left operand is their first tensor, and those whose
// left operand is their second (after the term they add).
constexpr std::string_view kMatmuls[] = {"mm",  "bmm",    "mv",     "dot",
                                         "vdot", "matmul", "linear", "inner"};
constexpr std::string_view kAddMatmuls[] = {"addmm", "baddbmm", "addmv", "_addmm_activation"};

bool isConvolution(std::string_view name) {
  return name.find("conv") != std::string_view::npos &&
         name.find("convert") == std::string_view::npos;
}

bool isAttention(std::string_view name) {
  return name.find("scaled_dot_product") != std::string_view::npos &&
         name.find("attention") != std::string_view::npos;
}

bool isGather(std::string_view name) {
  return isOneOf(name, {"embedding", "index_select", "index", "gather", "take"});
}

bool isNormalization(std::string_view name) {
  for (std::string_view part : {"softmax", "layer_norm", "batch_norm", "group_norm", "rms_norm"}) {
    if (name.find(part) != std::string_view::npos) return true;
  }
  return false;
}

uint64_t numelOf(const at::Tensor* t) { return static_cast<uint64_t>(t->numel()); }
uint64_t sizeAt(const at::Tensor* t, int64_t d) {
  return t->dim() == 0 ? 1 : static_cast<uint64_t>(t->size(d));
}

// The matmul class of `left` @ `right` (out has the output's shape): batched
// when both operands carry a batch, a projection when one operand is a matrix
// shared by every batch, 2-D otherwise.
void setMatmulClass(flex::WorkCost& cost, const at::Tensor* left, const at::Tensor* right,
                    const at::Tensor* out, uint64_t batch) {
  using Class = flex::WorkCost::Class;
  cost.batch = std::max<uint64_t>(batch, 1);
  cost.kind = Class::Matmul;
  if (cost.batch > 1) {
    cost.kind = (sharedOverBatch(*left) || sharedOverBatch(*right)) ? Class::Projection
                                                                     : Class::BatchedMatmul;
  }
  cost.out_cols = out->dim() >= 2 ? sizeAt(out, -1) : 1;
  cost.out_rows = std::max<uint64_t>(numelOf(out) / std::max<uint64_t>(cost.out_cols, 1) /
                                         cost.batch, 1);
  cost.operand_bytes = distinctBytesOf(*left) + distinctBytesOf(*right);
}

// Multiply-adds and the matmul class of matmul-class, attention and
// convolution ops; false for everything else.
bool setContraction(flex::WorkCost& cost, std::string_view name, const Tensors& inputs,
                    const at::Tensor* out, c10::ArrayRef<c10::IValue> args) {
  if (out == nullptr || inputs.empty()) return false;
  // The output's elements times the contracted length, the left operand's last dim.
  const at::Tensor* left = nullptr;
  const at::Tensor* right = nullptr;
  if (isOneOf(name, kMatmuls) && inputs.size() >= 2) {
    left = inputs[0], right = inputs[1];
  } else if (isOneOf(name, kAddMatmuls) && inputs.size() >= 3) {
    left = inputs[1], right = inputs[2];
  } else if (name == "addbmm" && inputs.size() >= 3) {
    // batch1 [B, M, K] @ batch2 [B, K, N] summed over B into [M, N].
    cost.macs = numelOf(inputs[1]) * sizeAt(inputs[2], -1);
    setMatmulClass(cost, inputs[1], inputs[2], out, 1);
    cost.batch = sizeAt(inputs[1], 0);
    cost.kind = cost.batch > 1 ? flex::WorkCost::Class::BatchedMatmul
                               : flex::WorkCost::Class::Matmul;
    return true;
  }
  if (left != nullptr) {
    if (left->dim() == 0) return false;
    cost.macs = numelOf(out) * sizeAt(left, -1);
    const bool batched = name == "bmm" || name == "baddbmm";
    setMatmulClass(cost, left, right, out, batched ? sizeAt(out, 0) : 1);
    if (out->dim() == 1 && left->dim() == 2) cost.out_rows = numelOf(out), cost.out_cols = 1;
    return true;
  }
  if (isAttention(name)) {
    // q [..., L, E], k [..., S, E], v [..., S, Ev]; the backward's first
    // argument is the output's gradient. Forward: q k^T and p v; backward:
    // q k^T again, then dp, dv, dq and dk.
    const bool backward = name.find("backward") != std::string_view::npos;
    const size_t q = backward ? 1 : 0;
    if (inputs.size() < q + 3 || inputs[q]->dim() < 2 || inputs[q + 2]->dim() < 2) return false;
    const at::Tensor* query = inputs[q];
    const uint64_t l = sizeAt(query, -2), e = sizeAt(query, -1);
    const uint64_t s = sizeAt(inputs[q + 1], -2), ev = sizeAt(inputs[q + 2], -1);
    const uint64_t batch = numelOf(query) / std::max<uint64_t>(l * e, 1);
    cost.macs = batch * l * s * (backward ? 3 * e + 2 * ev : e + ev);
    cost.kind = batch > 1 ? flex::WorkCost::Class::BatchedMatmul : flex::WorkCost::Class::Matmul;
    cost.batch = std::max<uint64_t>(batch, 1);
    cost.out_rows = l;  // the score matrix's tile
    cost.out_cols = s;
    cost.operand_bytes = distinctBytesOf(*query) + distinctBytesOf(*inputs[q + 1]) +
                         distinctBytesOf(*inputs[q + 2]);
    return true;
  }
  const bool conv = isConvolution(name);
  if (conv && inputs.size() >= 2 && inputs[1]->dim() >= 2) {
    const at::Tensor* weight = inputs[1];
    const uint64_t per_output = numelOf(weight) / sizeAt(weight, 0);
    bool transposed = name.find("transpose") != std::string_view::npos;
    // convolution / _convolution carry `transposed` as their 7th argument.
    if (args.size() > 6 && args[6].isBool()) transposed = transposed || args[6].toBool();
    // A transposed convolution scatters every input element over Cout/g x kernel.
    cost.macs = (transposed ? numelOf(inputs[0]) : numelOf(out)) * per_output;
    // As a matmul: output positions x output channels.
    cost.kind = flex::WorkCost::Class::Matmul;
    cost.out_cols = out->dim() >= 2 ? sizeAt(out, 1) : 1;
    cost.out_rows = std::max<uint64_t>(numelOf(out) / std::max<uint64_t>(cost.out_cols, 1), 1);
    cost.operand_bytes = distinctBytesOf(*inputs[0]) + distinctBytesOf(*weight);
    return true;
  }
  return false;
}

// The dims of `t` longer than 1, outermost (largest stride) first: its layout.
std::vector<int64_t> strideOrder(const at::Tensor& t) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.push_back(d);
  }
  std::stable_sort(dims.begin(), dims.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return dims;
}

// The dims an op reduces, from its `dim` argument (empty: all of them).
std::optional<std::vector<int64_t>> reducedDims(const c10::FunctionSchema& schema,
                                                c10::ArrayRef<c10::IValue> args) {
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size() && i < args.size(); ++i) {
    if (arguments[i].name() != "dim") continue;
    if (args[i].isInt()) return std::vector<int64_t>{args[i].toInt()};
    if (args[i].isIntList()) return args[i].toIntVector();
    return std::vector<int64_t>{};
  }
  return std::nullopt;
}

}  // namespace

bool contracts(const c10::FunctionSchema& schema) {
  const std::string_view name = baseName(schema);
  return isOneOf(name, kMatmuls) || isOneOf(name, kAddMatmuls) || name == "addbmm" ||
         isConvolution(name);
}

bool cardTiming() {
  static const bool on = flex::card::enabled();
  return on;
}

flex::WorkCost workCost(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                        c10::ArrayRef<c10::IValue> returns) {
  using Class = flex::WorkCost::Class;
  using Access = flex::WorkCost::Access;
  Tensors inputs;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < arguments.size() && arguments[i].is_out()) continue;
    collect(args[i], inputs);
  }
  Tensors outputs;
  for (const c10::IValue& r : returns) collect(r, outputs);

  flex::WorkCost cost;
  const std::string_view name = baseName(schema);
  int64_t largest_input = 0;
  int64_t largest_output = 0;
  const at::Tensor* largest_in = nullptr;
  for (const at::Tensor* t : inputs) {
    cost.bytes_read += distinctBytesOf(*t);
    if (largest_in == nullptr || t->numel() > largest_input) largest_in = t;
    largest_input = std::max(largest_input, t->numel());
  }
  for (const at::Tensor* t : outputs) {
    cost.bytes_written += bytesOf(*t);
    largest_output = std::max(largest_output, t->numel());
  }
  const at::Tensor* out = outputs.empty() ? nullptr : outputs[0];
  if (setContraction(cost, name, inputs, out, args)) return cost;
  if (out == nullptr) return cost;
  if (name == "clone" && inputs.size() == 1) return copyCost(*inputs[0], *out);
  if (isGather(name)) {
    // A gather reads the rows it returns and its indices, not the whole table.
    cost.kind = Class::DataMovement;
    cost.bytes_read = cost.bytes_written;
    for (const at::Tensor* t : inputs) {
      if (c10::isIntegralType(t->scalar_type(), /*includeBool=*/false)) {
        cost.bytes_read += distinctBytesOf(*t);
      }
    }
    return cost;
  }
  if (name == "cat" && out->dim() >= 1) {
    // Stick-plane transports: a cat along dim 0 gathers sticks (its pieces sit
    // just inside the stick in the card's layout); along another dim its
    // pieces are whole planes.
    int64_t dim = args.size() > 1 && args[1].isInt() ? args[1].toInt() : 0;
    if (dim < 0) dim += out->dim();
    cost.kind = Class::DataMovement;
    cost.access = Access::Transport;
    cost.transport = dim == 0 ? flex::WorkCost::Transport::Cat0 : flex::WorkCost::Transport::Cat1;
    cost.rows = dim == 0 ? (out->dim() >= 2 ? sizeAt(out, -2) : 1) : sizeAt(out, 0);
    cost.cols = sizeAt(out, -1);
    return cost;
  }
  if (isNormalization(name)) {
    cost.kind = Class::Normalization;
    return cost;
  }
  if (largest_input > largest_output) {
    // A full read and a small write: a reduction. Over the last (stick) dim
    // it reads at the rows' rate; over outer dims only, across rows.
    cost.kind = Class::Reduction;
    const std::optional<std::vector<int64_t>> dims = reducedDims(schema, args);
    const int64_t rank = largest_in->dim();
    bool keeps_last = dims.has_value() && !dims->empty() && rank >= 2;
    if (keeps_last) {
      for (int64_t d : *dims) keeps_last = keeps_last && (d < 0 ? d + rank : d) != rank - 1;
    }
    if (keeps_last) {
      cost.access = Access::Transport;
      cost.transport = flex::WorkCost::Transport::ReduceOuter;
    } else {
      cost.access = Access::Reduction;
      cost.rows = rank >= 2 ? sizeAt(largest_in, -2) : 0;
    }
    return cost;
  }
  for (const at::Tensor* t : inputs) {
    if (t->numel() > 1 && t->numel() < largest_output) {
      cost.access = Access::Broadcast;  // loaded once, reused
      break;
    }
  }
  return cost;
}

flex::WorkCost copyCost(const at::Tensor& src, const at::Tensor& dst) {
  flex::WorkCost cost;
  cost.kind = flex::WorkCost::Class::DataMovement;
  cost.bytes_read = distinctBytesOf(src);
  cost.bytes_written = bytesOf(dst);
  if (src.sizes() != dst.sizes()) return cost;
  const std::vector<int64_t> from = strideOrder(src);
  const std::vector<int64_t> to = strideOrder(dst);
  if (from == to || from.empty()) return cost;  // same layout: a plain (or converting) copy
  // A materialised transpose: the innermost (stick) dim changes (a
  // restickify), or outer dims swap under the same stick dim.
  cost.access = flex::WorkCost::Access::Transport;
  if (from.back() != to.back()) {
    cost.transport = flex::WorkCost::Transport::Restickify;
  } else {
    cost.transport = flex::WorkCost::Transport::TransposeOuter;
    cost.rows = sizeAt(&dst, -2);
    cost.cols = sizeAt(&dst, -1);
    cost.outer = dst.dim() == 3 ? sizeAt(&dst, 0) : 0;
  }
  return cost;
}

}  // namespace spyre::launch
