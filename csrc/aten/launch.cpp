#include "aten/launch.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/native/Resize.h>
#include <ATen/record_function.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/CallOnce.h>

#include "aten/engine_team.h"
#include "aten/meta_inference.h"
#include "aten/openmp.h"
#include "aten/tensor_ref.h"
#include "device/allocator.h"
#include "device/generator.h"
#include "runtime/runtime.h"

namespace spyre {

CpuKernelScope::CpuKernelScope(int num_threads, KernelSide side)
    : exclude_(c10::autograd_dispatch_keyset_with_ADInplaceOrView | c10::python_ks) {
  // An engine thread takes the caller's intra-op thread count
  // (torch.set_num_threads is per calling thread).
  if (num_threads > 0 && omp_get_max_threads() != num_threads) {
    omp_set_num_threads(num_threads);
  }
  if (side == KernelSide::Engine) placeEngineTeam();
}

CpuKernelScope::~CpuKernelScope() = default;

namespace {

using torch::jit::Stack;
constexpr c10::DispatchKeySet kSpyreKeys(c10::DispatchKey::PrivateUse1);

// ------------------------------------------------------------ verified kernels

// Kernel and dtype signatures whose first call ran (and succeeded) on a host
// thread: later calls may run on an engine.
class VerifiedSignatures {
 public:
  bool contains(const std::string& signature) {
    std::shared_lock<std::shared_mutex> lock(mutex_);
    return signatures_.count(signature) != 0;
  }
  void add(const std::string& signature) {
    std::unique_lock<std::shared_mutex> lock(mutex_);
    signatures_.insert(signature);
  }

 private:
  std::shared_mutex mutex_;
  std::unordered_set<std::string> signatures_;
};

VerifiedSignatures& verifiedSignatures() {
  static auto* signatures = new VerifiedSignatures();  // leaked: used at exit
  return *signatures;
}

// ------------------------------------------------------------ arguments

bool isSpyre(const at::Tensor& t) {
  return t.defined() && t.is_privateuseone();
}

// Calls fn(tensor) for every tensor of an argument (a Tensor, a Tensor[] or a
// Tensor?[]); undefined entries included.
template <class Fn>
void forEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

bool holdsTensors(const c10::IValue& value) {
  if (value.isTensor() || value.isTensorList()) return true;
  if (!value.isList()) return false;
  for (const c10::IValue& element : value.toListRef()) {
    if (element.isTensor()) return true;
  }
  return false;
}

[[noreturn]] void throwDeviceMismatch(c10::Device spyre, const at::Tensor& other,
                                      const c10::OperatorHandle& op) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two "
              "devices, ", spyre, " and ", other.device(), "! (in ",
              op.operator_name(), ")");
}

// Index ops take CPU index tensors (CUDA moves them to the device too).
bool takesHostIndices(const c10::OperatorHandle& op, const c10::Argument& argument) {
  if (argument.name() != "indices") return false;
  const std::string& name = op.schema().name();
  return name == "aten::index" || name == "aten::index_put" || name == "aten::index_put_" ||
         name == "aten::_index_put_impl_";
}

// CUDA's rule: every tensor on the op's device, except 0-dim CPU tensors
// (scalars). Returns the op's device index: that of its spyre tensors, or of a
// spyre device argument (factories), or the current device.
c10::DeviceIndex checkDevices(const c10::OperatorHandle& op, Stack* stack, size_t first) {
  const auto& arguments = op.schema().arguments();
  std::optional<c10::Device> spyre;  // a copy: list elements are not stable references
  std::optional<c10::DeviceIndex> device;
  for (size_t i = 0; i < arguments.size(); ++i) {
    c10::IValue& value = (*stack)[first + i];
    if (value.isDevice() && value.toDevice().is_privateuseone() && !device) {
      device = ensureDevice(value.toDevice().index());
    }
    if (takesHostIndices(op, arguments[i]) && value.isList()) {
      // Move host indices to the device first (a copy in stream order).
      c10::List<std::optional<at::Tensor>> indices = value.to<c10::List<std::optional<at::Tensor>>>();
      bool moved = false;
      for (size_t k = 0; k < indices.size(); ++k) {
        std::optional<at::Tensor> index = indices.get(k);
        if (index && index->defined() && index->is_cpu()) {
          indices.set(k, index->to(c10::Device(c10::DeviceType::PrivateUse1, ensureDevice(-1))));
          moved = true;
        }
      }
      if (moved) value = indices;
    }
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    forEachTensor((*stack)[first + i], [&](const at::Tensor& t) {
      if (isSpyre(t) && !spyre) spyre = t.device();
    });
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    forEachTensor((*stack)[first + i], [&](const at::Tensor& t) {
      if (!t.defined() || (t.is_cpu() && t.dim() == 0)) return;
      if (!spyre) {
        // No spyre tensor: a factory with device="spyre" and host tensor inputs.
        if (t.is_cpu()) return;
        TORCH_CHECK(false, "spyre: unexpected ", t.device(), " tensor argument for ",
                    op.operator_name());
      }
      if (t.device() != *spyre) throwDeviceMismatch(*spyre, t, op);
    });
  }
  if (spyre) return ensureDevice(spyre->index());
  return device ? *device : ensureDevice(-1);
}

// ------------------------------------------------------------ plan cache key

// The exact metadata of a call: everything a meta kernel may read. Returns
// false for arguments the launch path does not handle (objects, generators).
class KeyBuilder {
 public:
  explicit KeyBuilder(const c10::OperatorHandle& op) {
    words_.push_back(reinterpret_cast<int64_t>(&op.schema()));
  }

  bool add(const c10::IValue& v) {
    if (v.isTensor()) {
      addTensor(v.toTensor());
    } else if (v.isNone()) {
      words_.push_back(1);
    } else if (v.isInt()) {
      words_.push_back(2);
      words_.push_back(v.toInt());
    } else if (v.isDouble()) {
      words_.push_back(3);
      words_.push_back(bits(v.toDouble()));
    } else if (v.isBool()) {
      words_.push_back(4);
      words_.push_back(v.toBool());
    } else if (v.isComplexDouble()) {
      const c10::complex<double> c = v.toComplexDouble();
      words_.push_back(5);
      words_.push_back(bits(c.real()));
      words_.push_back(bits(c.imag()));
    } else if (v.isString()) {
      addString(v.toStringRef());
    } else if (v.isDevice()) {
      words_.push_back(7);
      words_.push_back(static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index());
    } else if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) {
      return false;
    } else if (v.isList()) {
      const auto list = v.toListRef();
      words_.push_back(8);
      words_.push_back(static_cast<int64_t>(list.size()));
      for (const c10::IValue& element : list) {
        if (!add(element)) return false;
      }
    } else {
      return false;  // generators, objects, futures, ...
    }
    return true;
  }

  std::vector<int64_t> take() { return std::move(words_); }

 private:
  static int64_t bits(double d) {
    int64_t b;
    std::memcpy(&b, &d, sizeof(b));
    return b;
  }

  void addString(const std::string& s) {
    words_.push_back(6);
    words_.push_back(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < s.size(); i += 8) {
      int64_t chunk = 0;
      std::memcpy(&chunk, s.data() + i, std::min<size_t>(8, s.size() - i));
      words_.push_back(chunk);
    }
  }

  void addTensor(const at::Tensor& t) {
    if (!t.defined()) {
      words_.push_back(-1);
      return;
    }
    // Which earlier tensor argument shares the storage: overlap checks depend on it.
    const c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
    int64_t alias = -1;
    for (size_t i = 0; i < storages_.size(); ++i) {
      if (storages_[i] == storage && storage != nullptr) alias = static_cast<int64_t>(i);
    }
    storages_.push_back(storage);
    words_.push_back(static_cast<int64_t>(t.device().type()));
    words_.push_back(static_cast<int64_t>(t.scalar_type()));
    words_.push_back((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) |
                     (t.unsafeGetTensorImpl()->is_wrapped_number() ? 4 : 0));
    words_.push_back(alias);
    words_.push_back(t.dim());
    for (const int64_t s : t.sizes()) words_.push_back(s);
    for (const int64_t s : t.strides()) words_.push_back(s);
    words_.push_back(t.storage_offset());
    words_.push_back(storage != nullptr ? static_cast<int64_t>(t.storage().nbytes()) : -1);
  }

  std::vector<int64_t> words_;
  std::vector<const c10::StorageImpl*> storages_;
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& words) const {
    uint64_t h = 1469598103934665603ull;
    for (const int64_t w : words) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// ------------------------------------------------------------ plans

struct Layout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  static Layout of(const at::Tensor& t) {
    if (!t.defined()) return {};  // dtype Undefined: an output the op did not compute
    return {t.sizes().vec(), t.strides().vec(), t.storage_offset(), t.scalar_type()};
  }
  bool defined() const { return dtype != c10::ScalarType::Undefined; }
};

struct OutputSpec {
  enum class Kind { New, Argument, View } kind = Kind::New;
  int arg = -1;       // Argument / View: the argument it is, or views
  bool list = false;  // a Tensor[] return
  std::vector<Layout> layouts;
};

struct Plan {
  bool synchronous = false;
  std::optional<c10::OperatorHandle> cpu_op;  // what runs on the engine
  bool out_variant = false;   // cpu_op is the out= variant: outputs appended
  bool copy_results = false;  // cpu_op is functional: results copied into outputs
  bool computes = true;       // false for pure views (nothing to launch)
  std::vector<OutputSpec> outputs;
  std::vector<std::pair<int, Layout>> resizes;  // out= arguments the meta kernel resized
  std::optional<c10::OperatorHandle> functional_op;  // the op itself
  std::string dtypes;                                // its tensors' dtypes
  std::string signature;                             // cpu_op and dtypes (verified once)
  bool verified = false;
  std::vector<c10::Warning> warnings;  // what the meta kernel warned: CPU warns on every call
};

// Collects the warnings of a meta run, so that every call can repeat them.
class WarningCollector final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  std::vector<c10::Warning> warnings;
};

class SilentWarnings final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& /*warning*/) override {}
};

c10::WarningHandler& silentWarnings() {
  static auto* handler = new SilentWarnings();
  return *handler;
}

bool isTensorType(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

bool isTensorListType(const c10::TypePtr& type) {
  const auto* list = type->castRaw<c10::ListType>();
  return list != nullptr && isTensorType(list->getElementType());
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
// integers, booleans, strings, None. Floating-point values are left out, so
// that a changing learning rate or scale does not make every call a new
// signature.
std::string dtypeSignature(const Stack& args) {
  std::string signature;
  for (const c10::IValue& v : args) {
    if (holdsTensors(v)) {
      forEachTensor(v, [&](const at::Tensor& t) {
        signature += t.defined() ? (t.is_cpu() ? "|c" : "|") + std::string(c10::toString(t.scalar_type()))
                                 : "|-";
      });
    } else if (v.isNone() || v.isInt() || v.isBool() || v.isString() || v.isIntList() ||
               v.isBoolList()) {
      std::ostringstream value;
      value << v;
      signature += "|=" + value.str();
    }
  }
  return signature;
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
    callMeta(op, meta_stack);  // C++ meta kernels (aten/meta_inference.h)
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
  plan->dtypes = dtypeSignature(args);
  for (const OutputSpec& spec : plan->outputs) {
    for (const Layout& l : spec.layouts) plan->dtypes += "|o" + std::string(c10::toString(l.dtype));
  }
  plan->signature = c10::toString(plan->cpu_op->operator_name()) + plan->dtypes;
  plan->verified = verifiedSignatures().contains(plan->signature);
  plan->synchronous = false;
  return plan;
}

std::shared_ptr<Plan> planFor(const c10::OperatorHandle& op, const Stack& args,
                              std::vector<int64_t> key) {
  thread_local std::unordered_map<std::vector<int64_t>, std::shared_ptr<Plan>, KeyHash> plans;
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  if (plans.size() >= 4096) plans.clear();  // shapes that never repeat: keep it bounded
  std::shared_ptr<Plan> plan = buildPlan(op, args);
  plans.emplace(std::move(key), plan);
  return plan;
}

// ------------------------------------------------------------ device tensors

at::Tensor emptySpyre(const Layout& layout) {
  return at::detail::empty_strided_generic(layout.sizes, layout.strides, deviceAllocator(),
                                           kSpyreKeys, layout.dtype);
}

// Give `t` the sizes and strides an out= kernel would (growing its storage
// in stream order when needed).
void restride(const at::Tensor& t, const Layout& layout) {
  const size_t needed = at::detail::computeStorageNbytes(layout.sizes, layout.strides,
                                                         t.dtype().itemsize(), layout.offset);
  if (needed > t.storage().nbytes()) resizeStorageBytes(t.storage(), needed);
  t.unsafeGetTensorImpl()->set_sizes_and_strides(layout.sizes, layout.strides, layout.offset);
}

at::Tensor viewOf(const at::Tensor& base, const Layout& layout) {
  return at::native::as_strided_tensorimpl(base, layout.sizes, layout.strides, layout.offset);
}

// A spyre tensor holding a host result of the synchronous path.
at::Tensor spyreCopyOf(const at::Tensor& host) {
  Layout layout = Layout::of(host);
  layout.offset = 0;
  if (!host.is_non_overlapping_and_dense()) {
    int64_t stride = 1;
    for (size_t d = layout.sizes.size(); d-- > 0;) {
      layout.strides[d] = stride;
      stride *= std::max<int64_t>(layout.sizes[d], 1);
    }
  }
  at::Tensor out = emptySpyre(layout);
  if (out.numel() > 0) TensorRef::of(out).cpuAlias().copy_(host);
  return out;
}

// ------------------------------------------------------------ engine work

// One launched op, as the engine sees it: the arguments with every tensor
// replaced by a TensorRef, and the outputs to write.
struct Work {
  struct Slot {
    int index;  // argument position
    enum class Kind { Tensor, TensorList, OptionalTensorList } kind;
    std::vector<std::optional<TensorRef>> refs;
  };
  c10::OperatorHandle cpu_op;
  bool out_variant;
  bool copy_results;
  Stack args;  // tensors replaced by None
  std::vector<Slot> slots;
  std::vector<std::vector<TensorRef>> outputs;  // per return (New ones only)
  std::vector<bool> output_is_list;
  int num_threads;
  bool on_engine = false;
  // Set by run() when a result of the functional op is not the output the
  // meta kernel described (its size or dtype): the meta kernel and CPU's
  // disagree, so the plan cannot be launched.
  bool result_mismatch = false;

  explicit Work(const c10::OperatorHandle& op) : cpu_op(op) {}

  static c10::IValue aliasOf(const Slot& slot) {
    switch (slot.kind) {
      case Slot::Kind::Tensor:
        return slot.refs[0] ? slot.refs[0]->cpuAlias() : at::Tensor();
      case Slot::Kind::TensorList: {
        c10::List<at::Tensor> list;
        for (const auto& ref : slot.refs) list.push_back(ref->cpuAlias());
        return list;
      }
      case Slot::Kind::OptionalTensorList: {
        c10::List<std::optional<at::Tensor>> list;
        for (const auto& ref : slot.refs) {
          list.push_back(ref ? std::optional<at::Tensor>(ref->cpuAlias()) : std::nullopt);
        }
        return list;
      }
    }
    return {};
  }

  c10::IValue outputAlias(size_t k) const {
    if (!output_is_list[k]) return outputs[k][0].cpuAlias();
    c10::List<at::Tensor> list;
    for (const TensorRef& ref : outputs[k]) list.push_back(ref.cpuAlias());
    return list;
  }

  enum class Scratch { Ok, Failed, Mismatch };

  // This work over zeroed host scratch memory of the same layout (tensors that
  // share memory share scratch): Ok when the kernel accepted it, Mismatch when
  // its results are not the outputs the meta kernel described.
  Scratch runOnScratch(std::vector<c10::Warning>& warnings) const {
    constexpr size_t kMaxScratchBytes = size_t{64} << 20;
    std::vector<std::pair<void*, at::Tensor>> scratch;
    size_t total = 0;
    auto substitute = [&](TensorRef& ref) {
      if (ref.cpu_scalar || ref.storage_base == nullptr) return;
      for (const auto& [base, buffer] : scratch) {
        if (base == ref.storage_base) {
          ref.storage_base = buffer.data_ptr();
          return;
        }
      }
      at::Tensor buffer = at::zeros({static_cast<int64_t>(ref.storage_nbytes)}, at::kByte);
      total += ref.storage_nbytes;
      scratch.emplace_back(ref.storage_base, buffer);
      ref.storage_base = buffer.data_ptr();
    };
    Work copy = *this;
    for (Slot& slot : copy.slots) {
      for (auto& ref : slot.refs) {
        if (ref) substitute(*ref);
      }
    }
    for (auto& refs : copy.outputs) {
      for (TensorRef& ref : refs) substitute(ref);
    }
    if (total > kMaxScratchBytes) return Scratch::Failed;
    WarningCollector collector;
    try {
      const c10::WarningUtils::WarningHandlerGuard collect(&collector);
      copy.run();
    } catch (const std::exception&) {
      return copy.result_mismatch ? Scratch::Mismatch : Scratch::Failed;
    }
    warnings = std::move(collector.warnings);
    return Scratch::Ok;
  }

  // out <- result, which must be what the meta kernel said (copy_ would
  // broadcast or convert it silently).
  void copyResult(const TensorRef& out, const at::Tensor& result) {
    if (!result.defined() || result.scalar_type() != out.dtype ||
        !result.sizes().equals(out.sizes)) {
      result_mismatch = true;
      TORCH_CHECK(false, "spyre: ", cpu_op.operator_name(), " returned ",
                  result.defined() ? result.sizes() : c10::IntArrayRef{}, " ",
                  result.defined() ? c10::toString(result.scalar_type()) : "undefined",
                  " where its meta kernel gave ", c10::IntArrayRef(out.sizes), " ",
                  c10::toString(out.dtype));
    }
    out.cpuAlias().copy_(result);
  }

  void run() {
    CpuKernelScope scope(num_threads, on_engine ? KernelSide::Engine : KernelSide::Host);
    at::DisableRecordFunctionGuard no_profiling;  // profiler callbacks may be Python
    // On an engine nobody hears a warning: the host repeats those of the
    // first (scratch) run at every call instead.
    std::optional<c10::WarningUtils::WarningHandlerGuard> silence;
    if (on_engine) silence.emplace(&silentWarnings());
    Stack stack = std::move(args);
    for (const Slot& slot : slots) stack[slot.index] = aliasOf(slot);
    if (out_variant) {
      for (size_t k = 0; k < outputs.size(); ++k) stack.push_back(outputAlias(k));
    }
    cpu_op.callBoxed(stack);
    if (copy_results) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (outputs[k].empty()) continue;  // an argument, written in place
        if (output_is_list[k]) {
          // outputs[k] holds the defined outputs only.
          std::vector<at::Tensor> results;
          for (const at::Tensor& t : stack[k].toTensorList()) {
            if (t.defined()) results.push_back(t);
          }
          if (results.size() != outputs[k].size()) {
            result_mismatch = true;
            TORCH_CHECK(false, "spyre: ", cpu_op.operator_name(), " returned ", results.size(),
                        " tensors where its meta kernel gave ", outputs[k].size());
          }
          for (size_t i = 0; i < results.size(); ++i) copyResult(outputs[k][i], results[i]);
        } else {
          copyResult(outputs[k][0], stack[k].toTensor());
        }
      }
    }
  }
};

Work::Slot slotOf(int index, const c10::IValue& v) {
  Work::Slot slot{index, Work::Slot::Kind::Tensor, {}};
  auto ref = [](const at::Tensor& t) {
    return t.defined() ? std::optional<TensorRef>(TensorRef::of(t)) : std::nullopt;
  };
  if (v.isTensor()) {
    slot.refs.push_back(ref(v.toTensor()));
  } else if (v.isTensorList()) {
    slot.kind = Work::Slot::Kind::TensorList;
    for (const at::Tensor& t : v.toTensorList()) slot.refs.push_back(ref(t));
  } else {
    slot.kind = Work::Slot::Kind::OptionalTensorList;
    for (const c10::IValue& e : v.toListRef()) {
      slot.refs.push_back(e.isTensor() ? ref(e.toTensor()) : std::nullopt);
    }
  }
  return slot;
}

void recordUses(const Stack& args, const SpyreStream& stream) {
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      if (isSpyre(t) && t.has_storage()) recordStream(t.storage().data_ptr(), stream);
    });
  }
}

void replaceArgsWithReturns(Stack* stack, size_t num_args, std::vector<c10::IValue> returns) {
  torch::jit::drop(*stack, num_args);
  for (c10::IValue& r : returns) stack->push_back(std::move(r));
}

// ------------------------------------------------------------ synchronous path

c10::IValue hostArgument(const c10::Argument& argument, const c10::IValue& v) {
  auto host = [&](const at::Tensor& t) -> at::Tensor {
    if (!isSpyre(t)) return t;
    // An out= tensor is replaced by a fresh host tensor the kernel may resize.
    if (argument.is_out()) return at::empty({0}, t.options().device(c10::kCPU));
    return TensorRef::of(t).cpuAlias();
  };
  if (v.isTensor()) return host(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(host(t));
    return list;
  }
  if (v.isList() && holdsTensors(v)) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(host(e.toTensor())) : std::nullopt);
    }
    return list;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(c10::kCPU);
  if (v.isGenerator() && v.toGenerator().device().is_privateuseone()) {
    return cpuGeneratorOf(v.toGenerator(), v.toGenerator().device().index());
  }
  if (v.isNone()) {
    const auto* optional = argument.type()->castRaw<c10::OptionalType>();
    if (optional != nullptr && optional->getElementType()->kind() == c10::TypeKind::GeneratorType) {
      return cpuGeneratorOf(std::nullopt, -1);  // random ops draw from spyre's generator
    }
  }
  return v;
}

// A host result as the spyre value the op returns: the argument it is (out=
// arguments receive the result), a view of the argument it aliases, or a new
// spyre tensor.
at::Tensor spyreResult(const c10::Argument& ret, int arg, const at::Tensor& result,
                       const Stack& args, const c10::FunctionSchema& schema) {
  if (!result.defined() || !result.is_cpu()) return result;
  if (arg >= 0 && args[arg].isTensor() && isSpyre(args[arg].toTensor())) {
    const at::Tensor& target = args[arg].toTensor();
    const bool aliases = result.has_storage() && target.has_storage() &&
                         result.storage().data() == target.storage().data();
    if (!ret.alias_info()->isWrite() && !aliases) return spyreCopyOf(result);
    if (ret.alias_info()->isWrite()) {
      if (schema.arguments()[arg].is_out()) {
        at::native::resize_output_check(target, result.sizes());  // CPU's warning
        Layout layout = Layout::of(result);
        layout.offset = target.storage_offset();
        restride(target, layout);
        if (target.numel() > 0) TensorRef::of(target).cpuAlias().copy_(result);
      }
      return target;
    }
    return viewOf(target, Layout::of(result));
  }
  return spyreCopyOf(result);
}

void runSynchronously(const c10::OperatorHandle& op, Stack* stack, size_t first,
                      c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  Stack args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  getCurrentStream(device).synchronize();
  Stack host;
  host.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) host.push_back(hostArgument(arguments[i], args[i]));
  {
    CpuKernelScope scope(0);
    op.callBoxed(host);
  }
  const auto& rets = schema.returns();
  std::vector<c10::IValue> returns;
  for (size_t k = 0; k < rets.size(); ++k) {
    const int arg = aliasedArgument(schema, rets[k]);
    c10::IValue& value = host[k];
    if (value.isTensor()) {
      returns.emplace_back(spyreResult(rets[k], arg, value.toTensor(), args, schema));
    } else if (value.isTensorList()) {
      if (arg >= 0 && rets[k].alias_info()->isWrite()) {
        returns.push_back(args[arg]);  // in-place on a list (foreach): written through
        continue;
      }
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList()) {
        list.push_back(arg >= 0 && args[arg].isTensor()
                           ? spyreResult(rets[k], arg, t, args, schema)
                           : spyreCopyOf(t));
      }
      returns.emplace_back(std::move(list));
    } else {
      returns.push_back(std::move(value));
    }
  }
  replaceArgsWithReturns(stack, arguments.size(), std::move(returns));
}

// First call of a plan's kernel and dtypes: try it on scratch data. An out=
// variant that warns or fails there (some use `out` as scratch space and
// resize it) is replaced by the functional op plus a copy. No when the kernel
// fails on scratch data anyway; Synchronous when CPU's results are not the
// outputs the meta kernel described (native_layer_norm's statistics of a half
// input, native_batch_norm's when not training): the op must run as CPU runs it.
enum class Verified { Yes, No, Synchronous };

Verified verifyPlan(Plan& plan, Work& work) {
  using Scratch = Work::Scratch;
  std::vector<c10::Warning> warnings;
  if (!verifiedSignatures().contains(plan.signature)) {
    if (plan.out_variant) {
      // An out= kernel converts (or resizes) into outputs that are not what
      // it would return: compare the functional op's results first.
      Work functional = work;
      functional.cpu_op = *plan.functional_op;
      functional.out_variant = false;
      functional.copy_results = true;
      std::vector<c10::Warning> ignored;
      if (functional.runOnScratch(ignored) == Scratch::Mismatch) return Verified::Synchronous;
    }
    Scratch result = work.runOnScratch(warnings);
    if (result == Scratch::Mismatch) return Verified::Synchronous;
    if (result != Scratch::Ok || (!warnings.empty() && plan.out_variant)) {
      if (!plan.out_variant) return Verified::No;
      plan.out_variant = work.out_variant = false;
      plan.copy_results = work.copy_results = true;
      plan.cpu_op = plan.functional_op;
      work.cpu_op = *plan.functional_op;
      plan.signature = c10::toString(plan.cpu_op->operator_name()) + plan.dtypes;
      warnings.clear();
      if (!verifiedSignatures().contains(plan.signature)) {
        result = work.runOnScratch(warnings);
        if (result == Scratch::Mismatch) return Verified::Synchronous;
        if (result != Scratch::Ok) return Verified::No;
      }
    }
  }
  for (c10::Warning& warning : warnings) {
    c10::warn(warning);
    plan.warnings.push_back(std::move(warning));
  }
  plan.verified = true;
  verifiedSignatures().add(plan.signature);
  return Verified::Yes;
}

}  // namespace

// ------------------------------------------------------------ entry points

void launchVerified(const SpyreStream& stream, const std::string& signature,
                    const std::function<void()>& verify, std::function<void()> work,
                    const char* name, size_t bytes) {
  checkEngineTeamSetting();
  if (!verifiedSignatures().contains(signature)) {
    verify();
    verifiedSignatures().add(signature);
  }
  stream.launchCompute(std::move(work), name, bytes);
}

void launchOpAs(const c10::OperatorHandle& op, const c10::OperatorHandle& compute_op,
                Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  const c10::DeviceIndex device = checkDevices(op, stack, first);
  checkEngineTeamSetting();
  const Stack args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());

  KeyBuilder key(compute_op);
  bool encodable = true;
  for (const c10::IValue& v : args) {
    if (!key.add(v)) {
      encodable = false;
      break;
    }
  }
  if (!encodable) {
    runSynchronously(compute_op, stack, first, device);
    return;
  }
  const std::shared_ptr<Plan> plan = planFor(compute_op, args, key.take());
  if (plan->synchronous) {
    runSynchronously(compute_op, stack, first, device);
    return;
  }

  for (const c10::Warning& warning : plan->warnings) c10::warn(warning);
  // Outputs, at the call: resized out= arguments, new tensors, views.
  for (const auto& [arg, layout] : plan->resizes) {
    const at::Tensor& out = args[arg].toTensor();
    at::native::resize_output_check(out, layout.sizes);  // CPU's warning, at every call
    restride(out, layout);
  }
  const SpyreStream stream = getCurrentStream(device);
  auto work = std::make_shared<Work>(*plan->cpu_op);
  work->out_variant = plan->out_variant;
  work->copy_results = plan->copy_results;
  work->num_threads = at::get_num_threads();
  std::vector<c10::IValue> returns;
  size_t bytes = 0;
  for (const OutputSpec& spec : plan->outputs) {
    std::vector<TensorRef> refs;
    c10::IValue value;
    if (spec.kind == OutputSpec::Kind::Argument) {
      value = args[spec.arg];
    } else if (spec.kind == OutputSpec::Kind::View) {
      value = viewOf(args[spec.arg].toTensor(), spec.layouts[0]);
    } else {
      c10::List<at::Tensor> list;
      for (const Layout& layout : spec.layouts) {
        if (!layout.defined()) {
          list.push_back(at::Tensor());
          continue;
        }
        at::Tensor t = emptySpyre(layout);
        bytes += t.nbytes();
        refs.push_back(TensorRef::of(t));
        list.push_back(std::move(t));
      }
      value = spec.list ? c10::IValue(list) : c10::IValue(list.get(0));
    }
    work->outputs.push_back(std::move(refs));
    work->output_is_list.push_back(spec.list);
    returns.push_back(std::move(value));
  }
  if (plan->computes) {
    work->args.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (holdsTensors(args[i])) {
        work->slots.push_back(slotOf(static_cast<int>(i), args[i]));
        work->args.emplace_back();
      } else if (args[i].isDevice() && args[i].toDevice().is_privateuseone()) {
        // A factory's device: the CPU kernel makes a host tensor (copied into
        // the output), not a spyre one through the launch path again.
        work->args.emplace_back(c10::Device(c10::kCPU));
      } else {
        work->args.push_back(args[i]);
      }
    }
    recordUses(args, stream);
    const char* name = compute_op.schema().name().c_str();
    const Verified verified = plan->verified ? Verified::Yes : verifyPlan(*plan, *work);
    if (verified == Verified::Synchronous) {
      plan->synchronous = true;
      runSynchronously(compute_op, stack, first, device);
      return;
    }
    if (verified == Verified::No) {
      // The kernel failed on scratch data: run it on the real data at the
      // call, so whatever it raises reaches the caller.
      stream.synchronize();
      try {
        work->run();
      } catch (const std::exception&) {
        if (!work->result_mismatch) throw;
        plan->synchronous = true;  // its results are not what the meta kernel said
        runSynchronously(compute_op, stack, first, device);
        return;
      }
      plan->verified = true;
      verifiedSignatures().add(plan->signature);
    } else {
      work->on_engine = true;
      stream.launchCompute([work] { work->run(); }, name, bytes);
    }
  }
  replaceArgsWithReturns(stack, num_args, std::move(returns));
}

void launchOp(const c10::OperatorHandle& op, Stack* stack) {
  launchOpAs(op, op, stack);
}

}  // namespace spyre
