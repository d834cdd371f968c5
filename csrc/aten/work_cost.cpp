#include "aten/work_cost.h"

#include <algorithm>
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

// Multiply-adds of matmul-class and convolution ops; 0 for everything else.
uint64_t macsOf(std::string_view name, const Tensors& inputs, const at::Tensor* out,
                c10::ArrayRef<c10::IValue> args) {
  if (out == nullptr || inputs.empty()) return 0;
  const auto numel = [](const at::Tensor* t) { return static_cast<uint64_t>(t->numel()); };
  // The output's elements times the contracted length, the left operand's last dim.
  const at::Tensor* left = nullptr;
  if (isOneOf(name, kMatmuls)) {
    left = inputs[0];
  } else if (isOneOf(name, kAddMatmuls) && inputs.size() >= 2) {
    left = inputs[1];
  } else if (name == "addbmm" && inputs.size() >= 3) {
    // batch1 [B, M, K] @ batch2 [B, K, N] summed over B into [M, N].
    return numel(inputs[1]) * static_cast<uint64_t>(inputs[2]->size(-1));
  }
  if (left != nullptr) {
    return left->dim() == 0 ? 0 : numel(out) * static_cast<uint64_t>(left->size(-1));
  }
  const bool conv = isConvolution(name);
  if (conv && inputs.size() >= 2 && inputs[1]->dim() >= 2) {
    const at::Tensor* weight = inputs[1];
    const uint64_t per_output = numel(weight) / static_cast<uint64_t>(weight->size(0));
    bool transposed = name.find("transpose") != std::string_view::npos;
    // convolution / _convolution carry `transposed` as their 7th argument.
    if (args.size() > 6 && args[6].isBool()) transposed = transposed || args[6].toBool();
    // A transposed convolution scatters every input element over Cout/g x kernel.
    return (transposed ? numel(inputs[0]) : numel(out)) * per_output;
  }
  return 0;
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
  Tensors inputs;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < arguments.size() && arguments[i].is_out()) continue;
    collect(args[i], inputs);
  }
  Tensors outputs;
  for (const c10::IValue& r : returns) collect(r, outputs);

  flex::WorkCost cost;
  int64_t largest_input = 0;
  int64_t largest_output = 0;
  for (const at::Tensor* t : inputs) {
    cost.bytes_read += bytesOf(*t);
    largest_input = std::max(largest_input, t->numel());
  }
  for (const at::Tensor* t : outputs) {
    cost.bytes_written += bytesOf(*t);
    largest_output = std::max(largest_output, t->numel());
  }
  cost.macs = macsOf(baseName(schema), inputs, outputs.empty() ? nullptr : outputs[0], args);
  if (cost.macs != 0) return cost;
  if (!outputs.empty() && largest_input > largest_output) {
    // A full read and a small write: a reduction over its output's rows.
    cost.access = flex::WorkCost::Access::Reduction;
    cost.rows = static_cast<uint64_t>(std::max<int64_t>(largest_output, 1));
  } else {
    for (const at::Tensor* t : inputs) {
      if (t->numel() > 1 && t->numel() < largest_output) {
        cost.access = flex::WorkCost::Access::Broadcast;  // loaded once, reused
        break;
      }
    }
  }
  return cost;
}

}  // namespace spyre::launch
