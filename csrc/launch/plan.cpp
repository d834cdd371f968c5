#include "launch/plan.h"

#include "launch/meta_inference.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>

#include <ATen/record_function.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/as_strided_native.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/accumulate.h>
#include <c10/util/strides.h>

#include "launch/launch.h"
#include "launch/op_arguments.h"
#include "launch/plan_key.h"
#include "launch/scalar_class.h"
#include "launch/queued_op.h"
#include "launch/work_cost.h"
#include "device/allocator.h"
#include "device/card_rules.h"

namespace spyre::launch {
namespace {

constexpr c10::DispatchKeySet kSpyreKeys(c10::DispatchKey::PrivateUse1);

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

bool isTensorType(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

bool isTensorListType(const c10::TypePtr& type) {
  const auto* list = type->castRaw<c10::ListType>();
  return list != nullptr && isTensorType(list->getElementType());
}

// A seeded op whose only randomness is a dropout_p argument of 0 (the fused
// attention kernels) draws nothing from a generator, so it may be queued.
bool drawsNothing(const c10::FunctionSchema& schema, const Stack& args) {
  const std::optional<int> dropout = schema.argumentIndexWithName("dropout_p");
  if (!dropout) return false;
  const c10::IValue& p = args[static_cast<size_t>(*dropout)];
  return p.isDouble() && p.toDouble() == 0.0;
}

// Ops the engine may run: aten kernels (C++), with tensor results whose
// shapes follow from metadata, drawing no random numbers.
bool mayRunOnEngine(const c10::OperatorHandle& op, const Stack& args) {
  const c10::FunctionSchema& schema = op.schema();
  if (schema.name().rfind("aten::", 0) != 0) return false;
  if (op.hasTag(at::Tag::data_dependent_output)) return false;
  if (op.hasTag(at::Tag::nondeterministic_seeded) && !drawsNothing(schema, args)) return false;
  if (op.hasTag(at::Tag::dynamic_output_shape)) {
    // index with integer indices has a static shape; boolean masks do not.
    if (schema.name() != "aten::index") return false;
    bool masks = false;
    for (const c10::IValue& v : args) {
      forEachTensor(v, [&](const at::Tensor& t) {
        if (t.defined() && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)) {
          masks = true;
        }
      });
    }
    if (masks) return false;
  }
  for (const c10::Argument& ret : schema.returns()) {
    if (!isTensorType(ret.type()) && !isTensorListType(ret.type())) return false;
  }
  return true;
}

// The out= overload of a functional op: same name, the same arguments, then
// one out argument per return. nullopt when there is none.
std::optional<c10::OperatorHandle> outVariantOf(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static auto* overloads = new std::unordered_map<std::string, std::vector<c10::OperatorName>>();
  static auto* cache = new std::unordered_map<const c10::FunctionSchema*, std::optional<c10::OperatorHandle>>();
  std::lock_guard<std::mutex> lock(mutex);
  if (overloads->empty()) {
    for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
      (*overloads)[name.name].push_back(name);
    }
  }
  const c10::FunctionSchema& schema = op.schema();
  if (auto it = cache->find(&schema); it != cache->end()) return it->second;
  std::optional<c10::OperatorHandle> found;
  const auto& args = schema.arguments();
  const auto& rets = schema.returns();
  for (const c10::OperatorName& name : (*overloads)[schema.name()]) {
    std::optional<c10::OperatorHandle> candidate = c10::Dispatcher::singleton().findOp(name);
    if (!candidate || !candidate->hasSchema()) continue;
    const auto& cargs = candidate->schema().arguments();
    if (cargs.size() != args.size() + rets.size()) continue;
    bool match = true;
    for (size_t i = 0; i < args.size() && match; ++i) {
      match = !cargs[i].is_out() && cargs[i].name() == args[i].name() &&
              *cargs[i].type() == *args[i].type();
    }
    for (size_t k = 0; k < rets.size() && match; ++k) {
      const c10::Argument& out = cargs[args.size() + k];
      match = out.is_out() && *out.type() == *rets[k].type();
    }
    if (match) {
      found = candidate;
      break;
    }
  }
  cache->emplace(&schema, found);
  return found;
}

at::Tensor metaTensorOf(const at::Tensor& t,
                        std::vector<std::pair<const c10::StorageImpl*, c10::Storage>>& storages) {
  if (!t.defined() || t.is_cpu()) return t;  // CPU scalars stay as they are
  const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
  c10::Storage storage;
  for (const auto& [impl, meta] : storages) {
    if (impl == key) storage = meta;
  }
  if (!storage) {
    // Tensors sharing a storage share the meta storage: overlap checks see it.
    storage = c10::Storage(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                           c10::GetAllocator(c10::kMeta), /*resizable=*/true);
    storages.emplace_back(key, storage);
  }
  at::Tensor meta = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::Meta), t.dtype());
  meta.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  meta._set_conj(t.is_conj());
  meta._set_neg(t.is_neg());
  return meta;
}

c10::IValue toMeta(const c10::IValue& v,
                   std::vector<std::pair<const c10::StorageImpl*, c10::Storage>>& storages) {
  if (v.isTensor()) return metaTensorOf(v.toTensor(), storages);
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(metaTensorOf(t, storages));
    return list;
  }
  if (v.isList() && holdsTensors(v)) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(metaTensorOf(e.toTensor(), storages))
                                  : std::nullopt);
    }
    return list;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(c10::kMeta);
  return v;
}

// The tensors' dtypes, and the arguments that may change what a kernel
// returns (CPU's native_batch_norm returns empty statistics when not training,
// binary_cross_entropy's out= variant resizes its output for a reduction):
// integers, booleans, strings, None. Floating-point and complex values, and
// the values of 0-dim CPU tensors, enter by their class (launch/scalar_class.h:
// what a kernel's conversion checks see), so that a changing learning rate or
// scale does not make every call a new signature, while a value a kernel
// cannot convert (-1e9 for float16) is never taken for a verified one.
std::string dtypeSignature(const Stack& args) {
  std::string signature;
  for (const c10::IValue& v : args) {
    if (holdsTensors(v)) {
      forEachTensor(v, [&](const at::Tensor& t) {
        if (!t.defined()) {
          signature += "|-";
          return;
        }
        signature += (t.is_cpu() ? "|c" : "|") + std::string(c10::toString(t.scalar_type()));
        if (t.is_cpu() && t.dim() == 0) signature += "~" + std::to_string(scalarClass(t));
      });
    } else if (v.isDouble() || v.isComplexDouble()) {
      signature += "|~" + std::to_string(scalarClass(v.toScalar()));
    } else if (v.isNone() || v.isInt() || v.isBool() || v.isString() || v.isIntList() ||
               v.isBoolList()) {
      std::ostringstream value;
      value << v;
      signature += "|=" + value.str();
    }
  }
  return signature;
}

// The arithmetic ops whose CPU kernel (TensorIterator) converts a CPU scalar
// operand to the common dtype, which is their result's dtype, with a copy at
// every call: the launch converts a Python number once, as that copy would
// (static_cast). Not for half and bfloat16 results: their kernels read the
// scalar's original value at a higher precision (original_scalar_value).
c10::ScalarType scalarTargetOf(const c10::OperatorHandle& op,
                               const c10::SmallVector<OutputSpec, 1>& outputs) {
  static const std::set<std::string> converting = {
      "aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor", "aten::sub_.Tensor",
      "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::div_.Tensor"};
  if (outputs.size() != 1 || outputs[0].list || outputs[0].layouts.size() != 1) {
    return c10::ScalarType::Undefined;
  }
  if (!converting.count(c10::toString(op.operator_name()))) return c10::ScalarType::Undefined;
  const c10::ScalarType dtype = outputs[0].layouts[0].dtype;
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Long:
    case c10::ScalarType::Int:
    case c10::ScalarType::Short:
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
      return dtype;
    default:
      return c10::ScalarType::Undefined;
  }
}

// Meta inference: what the outputs are, which kernel computes them. A plan
// that cannot be made (no meta kernel, an error, results that are not
// tensors) is synchronous: the CPU kernel then runs at the call and raises
// what it raises.
std::shared_ptr<Plan> buildPlan(const c10::OperatorHandle& op, const Stack& args) {
  auto plan = std::make_shared<Plan>();
  plan->synchronous = true;
  if (!mayRunOnEngine(op, args)) return plan;
  const c10::FunctionSchema& schema = op.schema();
  std::vector<std::pair<const c10::StorageImpl*, c10::Storage>> storages;
  Stack meta_args;
  meta_args.reserve(args.size());
  for (const c10::IValue& v : args) meta_args.push_back(toMeta(v, storages));
  Stack meta_stack = meta_args;
  WarningCollector collector;
  try {
    const c10::WarningUtils::WarningHandlerGuard collect(&collector);
    const CpuKernelScope scope(0);
    const at::DisableRecordFunctionGuard unrecorded;  // inference, not the user's ops
    callMeta(op, meta_stack);  // C++ meta kernels (launch/meta_inference.h)
  } catch (const std::exception&) {
    return plan;
  }
  for (c10::Warning& warning : collector.warnings) {
    // out= resizes warn at the call (resize_output_check), in CPU's words.
    if (warning.msg().rfind("An output with one or more elements was resized", 0) == 0) continue;
    plan->warnings.push_back(std::move(warning));
  }
  bool has_new = false;
  bool has_view = false;
  bool has_undefined = false;
  const auto& rets = schema.returns();
  for (size_t k = 0; k < rets.size(); ++k) {
    OutputSpec spec;
    spec.list = isTensorListType(rets[k].type());
    const int arg = aliasedArgument(schema, rets[k]);
    std::vector<at::Tensor> results;
    if (spec.list) {
      for (const at::Tensor& t : meta_stack[k].toTensorList()) results.push_back(t);
    } else {
      results.push_back(meta_stack[k].toTensor());
    }
    for (const at::Tensor& t : results) {
      if (t.defined() && !t.is_meta()) return plan;
      if (!t.defined()) has_undefined = true;  // e.g. a gradient output_mask did not ask for
      spec.layouts.push_back(Layout::of(t));
    }
    if (arg >= 0 && rets[k].alias_info()->isWrite()) {
      spec.kind = OutputSpec::Kind::Argument;
    } else if (arg >= 0) {
      spec.kind = OutputSpec::Kind::View;
      has_view = true;
    } else {
      for (const at::Tensor& t : results) {
        if (t.defined() && !t.is_non_overlapping_and_dense()) return plan;
      }
      has_new = true;
    }
    if (spec.kind != OutputSpec::Kind::New && has_undefined) return plan;
    spec.arg = arg;
    plan->outputs.push_back(std::move(spec));
  }
  // Written arguments: out= ones may have been resized; others must not change.
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* info = arguments[i].alias_info();
    if (info == nullptr || !info->isWrite() || !meta_args[i].isTensor()) continue;
    const at::Tensor& before = args[i].toTensor();
    const at::Tensor& after = meta_args[i].toTensor();
    if (!before.defined() || before.is_cpu()) return plan;
    if (after.sizes().equals(before.sizes()) && after.strides().equals(before.strides()) &&
        after.storage_offset() == before.storage_offset()) {
      continue;
    }
    if (!arguments[i].is_out()) return plan;
    plan->resizes.emplace_back(static_cast<int>(i), Layout::of(after));
  }
  if (has_view && (has_new || !plan->resizes.empty())) return plan;
  plan->cpu_op = op;
  plan->computes = !has_view;
  if (has_new) {
    const bool functional = std::none_of(arguments.begin(), arguments.end(),
                                         [](const c10::Argument& a) { return a.is_out(); });
    std::optional<c10::OperatorHandle> out = functional ? outVariantOf(op) : std::nullopt;
    bool all_new = std::all_of(plan->outputs.begin(), plan->outputs.end(), [](const OutputSpec& s) {
      return s.kind == OutputSpec::Kind::New;
    });
    // Losses (a `reduction` argument) compute the unreduced loss into `out`
    // and then resize it, for some shapes only: the functional op, then a copy.
    const bool reduces = std::any_of(arguments.begin(), arguments.end(),
                                     [](const c10::Argument& a) { return a.name() == "reduction"; });
    if (out && all_new && !has_undefined && !reduces) {
      plan->cpu_op = out;
      plan->out_variant = true;
    } else {
      plan->copy_results = true;
    }
  }
  plan->functional_op = op;
  plan->contracts = contracts(schema);
  plan->scalar_to = scalarTargetOf(op, plan->outputs);
  std::string dtypes = dtypeSignature(args);
  for (const OutputSpec& spec : plan->outputs) {
    for (const Layout& l : spec.layouts) dtypes += "|o" + std::string(c10::toString(l.dtype));
  }
  plan->signature =
      std::make_shared<const std::string>(c10::toString(plan->cpu_op->operator_name()) + dtypes);
  plan->dtypes = std::make_shared<const std::string>(std::move(dtypes));
  plan->verified = verifiedSignatures().contains(*plan->signature);
  plan->synchronous = false;
  return plan;
}

}  // namespace

c10::WarningHandler& silentWarnings() {
  static auto* handler = new SilentWarnings();
  return *handler;
}

// The argument a return aliases (same alias set), or -1.
int aliasedArgument(const c10::FunctionSchema& schema, const c10::Argument& ret) {
  if (ret.alias_info() == nullptr) return -1;
  const auto& arguments = schema.arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* info = arguments[i].alias_info();
    if (info != nullptr && info->beforeSets() == ret.alias_info()->beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

namespace {

struct PlanCache {
  PlanCounts counts;
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<Plan>, KeyHash, KeyEqual> plans;
  // Plans by their shape-free key (see templatePlan).
  std::unordered_map<std::vector<int64_t>, std::shared_ptr<const Plan>, KeyHash, KeyEqual>
      templates;
  // The last plan found, with its key: a loop of one call compares words
  // instead of hashing them and building a vector to look them up.
  std::vector<int64_t> last_key;
  std::shared_ptr<Plan> last_plan;
};

// Ops whose outputs' sizes follow from their arguments' one shape by a rule:
// pointwise ops (torch's `pointwise` tag, TensorIterator) keep the shape;
// these reductions drop their reduced dimensions (or keep them as 1).
enum class SizeRule { None, Pointwise, Reduction };

SizeRule sizeRuleOf(const c10::OperatorHandle& op) {
  if (op.hasTag(at::Tag::pointwise)) return SizeRule::Pointwise;
  static const std::set<std::string> reductions = {
      "aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::prod", "aten::logsumexp"};
  const c10::FunctionSchema& schema = op.schema();
  if (reductions.count(schema.name()) && schema.returns().size() == 1 &&
      std::none_of(schema.arguments().begin(), schema.arguments().end(),
                   [](const c10::Argument& a) { return a.is_out(); })) {
    return SizeRule::Reduction;
  }
  return SizeRule::None;
}

// The sizes the rule gives for arguments of `shape` (a call of rank >= 1).
// Small vectors: a first pass over new shapes calls this at every op.
c10::DimVector ruleSizes(SizeRule rule, const c10::FunctionSchema& schema, const Stack& args,
                         c10::IntArrayRef shape) {
  if (rule == SizeRule::Pointwise) return c10::DimVector(shape.begin(), shape.end());
  const int64_t rank = static_cast<int64_t>(shape.size());
  c10::SmallVector<bool, 8> reduced(shape.size(), true);  // no dim, None or []: every dimension
  if (const std::optional<int> dim = schema.argumentIndexWithName("dim")) {
    const c10::IValue& d = args[static_cast<size_t>(*dim)];
    auto reduce = [&, first = true](int64_t k) mutable {
      if (std::exchange(first, false)) reduced.assign(shape.size(), false);
      reduced[c10::maybe_wrap_dim(k, rank)] = true;
    };
    if (d.isInt()) reduce(d.toInt());
    if (d.isIntList()) {
      for (const int64_t k : d.toIntList()) reduce(k);
    }
  }
  const std::optional<int> keepdim = schema.argumentIndexWithName("keepdim");
  const bool keep = keepdim && args[static_cast<size_t>(*keepdim)].isBool() &&
                    args[static_cast<size_t>(*keepdim)].toBool();
  c10::DimVector sizes;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!reduced[i]) {
      sizes.push_back(shape[i]);
    } else if (keep) {
      sizes.push_back(1);
    }
  }
  return sizes;
}

// Whether `plan` has the form a template needs: queued, new contiguous
// outputs of `sizes`, nothing resized, nothing warned.
bool isTemplate(const Plan& plan, c10::IntArrayRef sizes) {
  if (plan.synchronous || !plan.computes || !plan.resizes.empty() || !plan.warnings.empty()) {
    return false;
  }
  const c10::DimVector strides = c10::contiguous_strides(sizes);
  return std::all_of(plan.outputs.begin(), plan.outputs.end(), [&](const OutputSpec& spec) {
    return spec.kind == OutputSpec::Kind::New && !spec.list && spec.layouts.size() == 1 &&
           spec.layouts[0].defined() && spec.layouts[0].offset == 0 &&
           c10::IntArrayRef(spec.layouts[0].sizes).equals(sizes) &&
           c10::IntArrayRef(spec.layouts[0].strides).equals(strides);
  });
}

// A loop over new shapes (a first pass, variable sequence lengths) would run
// a meta kernel at every call. An op with a size rule whose tensor arguments
// are all contiguous device tensors of one shape returns contiguous tensors
// of the rule's sizes (TensorIterator lays out outputs as its inputs), with
// dtypes that depend on the arguments' dtypes only: the plan made for one
// shape serves every other once its outputs' sizes are changed. Only plans
// seen to have that form for the rule's sizes serve as templates.
std::shared_ptr<Plan> templatePlan(PlanCache& cache, const c10::OperatorHandle& op,
                                   const Stack& args) {
  ++cache.counts.meta_runs;  // undone below when a template serves
  const SizeRule rule = sizeRuleOf(op);
  if (rule == SizeRule::None) return buildPlan(op, args);
  KeyBuilder key = KeyBuilder::shapeFree(op);
  bool fits = true;
  for (const c10::IValue& v : args) {
    if (!key.add(v)) {
      fits = false;
      break;
    }
  }
  const c10::IntArrayRef shape = key.shape();
  // Empty tensors and 0-dim-only calls keep their own meta run.
  fits = fits && !shape.empty() && c10::multiply_integers(shape) != 0;
  if (!fits) return buildPlan(op, args);
  c10::SmallVector<int64_t, 64> words(key.words().begin(), key.words().end());
  words.push_back(static_cast<int64_t>(shape.size()));
  if (auto it = cache.templates.find(c10::ArrayRef<int64_t>(words));
      it != cache.templates.end()) {
    --cache.counts.meta_runs;
    ++cache.counts.from_template;
    auto plan = std::make_shared<Plan>(*it->second);
    plan->may_fork_team = -1;  // another shape
    const c10::DimVector sizes = ruleSizes(rule, op.schema(), args, shape);
    const c10::DimVector strides = c10::contiguous_strides(sizes);
    for (OutputSpec& spec : plan->outputs) {
      spec.layouts[0].sizes.assign(sizes.begin(), sizes.end());
      spec.layouts[0].strides.assign(strides.begin(), strides.end());
    }
    return plan;
  }
  std::shared_ptr<Plan> plan = buildPlan(op, args);
  // (A synchronous plan may be an argument error: no sizes are computed for it.)
  if (!plan->synchronous && isTemplate(*plan, ruleSizes(rule, op.schema(), args, shape))) {
    if (cache.templates.size() >= 1024) cache.templates.clear();
    cache.templates.emplace(std::vector<int64_t>(words.begin(), words.end()), plan);
  }
  return plan;
}

PlanCache& threadPlanCache() {
  thread_local PlanCache cache;
  return cache;
}

}  // namespace

PlanCounts planCounts() { return threadPlanCache().counts; }

std::shared_ptr<Plan> planFor(const c10::OperatorHandle& op, const Stack& args,
                              c10::ArrayRef<int64_t> key) {
  PlanCache& cache = threadPlanCache();
  if (cache.last_plan && key.equals(cache.last_key)) return cache.last_plan;
  std::shared_ptr<Plan> plan;
  if (auto it = cache.plans.find(key); it != cache.plans.end()) {
    plan = it->second;
  } else {
    if (cache.plans.size() >= 4096) cache.plans.clear();  // shapes that never repeat: keep it bounded
    plan = templatePlan(cache, op, args);
    cache.plans.emplace(key.vec(), plan);
  }
  cache.last_key.assign(key.begin(), key.end());  // in place: no allocation once it has room
  cache.last_plan = plan;
  return plan;
}

at::Tensor emptySpyre(const Layout& layout, CheckedDevice device) {
  // What at::detail::empty_strided_generic does, with the device known (and,
  // under the card's rules, the card's dtypes and the result's stick layout:
  // card_rules.h).
  checkCardDtype(layout.dtype, "allocate a tensor of");
  const size_t nbytes = deviceTensorBytes(
      at::detail::computeStorageNbytes(layout.sizes, layout.strides,
                                       c10::elementSize(layout.dtype)),
      layout.sizes, layout.dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes,
                       allocate(nbytes, device), deviceAllocator(),
                       /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), kSpyreKeys, c10::scalarTypeToTypeMeta(layout.dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(layout.sizes, layout.strides);
  return t;
}

// Give `t` the sizes and strides an out= kernel would (growing its storage
// in stream order when needed).
void restride(const at::Tensor& t, const Layout& layout) {
  const size_t needed = at::detail::computeStorageNbytes(layout.sizes, layout.strides,
                                                         t.dtype().itemsize(), layout.offset);
  if (needed > t.storage().nbytes()) {
    resizeStorageBytes(t.storage(), deviceTensorBytes(needed, layout.sizes, t.scalar_type()));
  }
  t.unsafeGetTensorImpl()->set_sizes_and_strides(layout.sizes, layout.strides, layout.offset);
}

at::Tensor viewOf(const at::Tensor& base, const Layout& layout) {
  return at::native::as_strided_tensorimpl(base, layout.sizes, layout.strides, layout.offset);
}
}  // namespace spyre::launch
