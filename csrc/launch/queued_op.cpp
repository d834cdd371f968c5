#include "launch/queued_op.h"

#include <algorithm>
#include <atomic>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/accumulate.h>

#include "launch/argument_writes.h"
#include "launch/engine_team.h"
#include "launch/launch.h"
#include "launch/op_arguments.h"
#include "launch/openmp.h"
#include "launch/stream_uses.h"
#include "device/allocator.h"
#include "device/numerics.h"

namespace spyre::launch {

namespace {
// The running thread's CPU aliases, in the order run() asks for them.
struct AliasCache {
  c10::SmallVector<at::Tensor, 8> aliases;
  size_t next = 0;
};
thread_local AliasCache t_aliases;

// The alias of `ref` for this run: the thread's cached one re-pointed when
// nothing else holds it, else a new one (kept for the next run).
at::Tensor aliasFor(const TensorRef& ref, bool fresh) {
  if (fresh) return ref.cpuAlias();
  AliasCache& cache = t_aliases;
  const size_t k = cache.next++;
  if (k < cache.aliases.size()) {
    at::Tensor& cached = cache.aliases[k];
    if (cached.use_count() != 1 || !ref.repoint(cached)) cached = ref.cpuAlias();
    return cached;
  }
  cache.aliases.push_back(ref.cpuAlias());
  return cache.aliases.back();
}
}  // namespace

c10::IValue QueuedOp::aliasOf(const Slot& slot, bool fresh) {
  switch (slot.kind) {
    case Slot::Kind::Tensor:
      return slot.refs[0] ? aliasFor(*slot.refs[0], fresh) : at::Tensor();
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

c10::IValue QueuedOp::outputAlias(size_t k, bool fresh) {
  if (!output_is_list[k]) return aliasFor(outputs[k][0], fresh);
  c10::List<at::Tensor> list;
  for (const TensorRef& ref : outputs[k]) list.push_back(ref.cpuAlias());
  return list;
}

// This work over zeroed host scratch memory of the same layout (tensors that
// share memory share scratch): Ok when the kernel accepted it, Mismatch when
// its results are not the outputs the meta kernel described.
QueuedOp::Scratch QueuedOp::runOnScratch(std::vector<c10::Warning>& warnings) const {
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
  QueuedOp copy = *this;
  for (Slot& slot : copy.slots) {
    for (auto& ref : slot.refs) {
      if (ref) substitute(*ref);
    }
  }
  for (auto& refs : copy.outputs) {
    for (TensorRef& ref : refs) substitute(ref);
  }
  if (total > kMaxScratchBytes) return Scratch::Failed;
  // The scratch run checks the kernel; nobody reads what it computes. One thread:
  // a parallel kernel would wake this thread's OpenMP team, whose threads then
  // wait for cores the engines running other streams' work hold, so a first op
  // would wait for other streams' work (docs/performance.md, issue 52).
  const int threads = omp_get_max_threads();
  copy.num_threads = 1;
  struct RestoreThreads {
    int threads;
    ~RestoreThreads() { omp_set_num_threads(threads); }
  } restore{threads};
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

void QueuedOp::prepareReplay() {
  replayable = true;
  replay_stack = args;
  for (const Slot& slot : slots) replay_stack[slot.index] = aliasOf(slot, /*fresh=*/true);
  for (size_t k = 0; k < outputs.size(); ++k) {
    replay_outputs.push_back(outputs[k].empty() ? c10::IValue() : outputAlias(k, /*fresh=*/true));
    if (out_variant) replay_stack.push_back(replay_outputs.back());
  }
  if (!copy_results) replay_kernel = resolveReplayKernel(cpu_op, replay_stack);
}

// out <- result, which must be what the meta kernel said (copy_ would
// broadcast or convert it silently).
void QueuedOp::copyResult(const TensorRef& out, const at::Tensor& result) {
  copyResult(out, result, out.cpuAlias());
}

void QueuedOp::copyResult(const TensorRef& out, const at::Tensor& result, const at::Tensor& alias) {
  if (!result.defined() || result.scalar_type() != out.dtype ||
      !result.sizes().equals(out.sizes)) {
    result_mismatch = true;
    TORCH_CHECK(false, "spyre: ", cpu_op.operator_name(), " returned ",
                result.defined() ? result.sizes() : c10::IntArrayRef{}, " ",
                result.defined() ? c10::toString(result.scalar_type()) : "undefined",
                " where its meta kernel gave ", c10::IntArrayRef(out.sizes), " ",
                c10::toString(out.dtype));
  }
  alias.copy_(result);
}

void QueuedOp::roundWrites(c10::ArrayRef<const Slot*> written) const {
  int64_t overflowed = 0;
  auto roundRef = [&](const TensorRef& ref) {
    if (isDl16Dtype(ref.dtype) && !ref.cpu_scalar) overflowed += roundToDl16(ref.cpuAlias());
  };
  for (const auto& refs : outputs) {
    for (const TensorRef& ref : refs) roundRef(ref);
  }
  for (const Slot* slot : written) {
    for (const auto& ref : slot->refs) {
      if (ref) roundRef(*ref);
    }
  }
  if (overflowed != 0) recordOverflow(c10::toString(cpu_op.operator_name()), overflowed);
}

bool QueuedOp::mayForkTeam() const {
  int64_t largest = 0;
  auto add = [&](const TensorRef& ref) {
    largest = std::max(largest, c10::multiply_integers(ref.sizes));
  };
  for (const Slot& slot : slots) {
    for (const auto& ref : slot.refs) {
      if (ref) add(*ref);
    }
  }
  for (const auto& refs : outputs) {
    for (const TensorRef& ref : refs) add(ref);
  }
  return spyre::mayForkTeam(largest, contracts);
}

void QueuedOp::run() {
  CpuKernelScope scope(num_threads, on_engine ? KernelSide::Engine : KernelSide::Host,
                       on_engine && may_fork_team);
  const bool to_dl16 = C10_UNLIKELY(dl16Writes());
  if (replay_kernel != nullptr && !to_dl16) {
    replay_kernel->run();  // a stub's loop: it neither warns nor records
    return;
  }
  t_aliases.next = 0;
  at::DisableRecordFunctionGuard no_profiling;  // profiler callbacks may be Python
  // On an engine nobody hears a warning: the host repeats those of the
  // first (scratch) run at every call instead.
  std::optional<c10::WarningUtils::WarningHandlerGuard> silence;
  if (on_engine) silence.emplace(&silentWarnings());
  // A replayed node's stack: the thread's own, so that its capacity is kept
  // from node to node (run() is not reentrant: CPU kernels never launch).
  thread_local Stack replayed;
  Stack owned;
  Stack& stack = replayable ? replayed : owned;
  // DLFloat16 numerics: the slots the op writes in place, found before the
  // arguments are moved into the stack; rounded with the outputs below.
  c10::SmallVector<const Slot*, 2> written;
  if (to_dl16) {
    const Stack& arguments = replayable ? replay_stack : args;
    for (const Slot& slot : slots) {
      if (writesInPlace(cpu_op.schema(), arguments, static_cast<size_t>(slot.index))) {
        written.push_back(&slot);
      }
    }
  }
  // The outputs' aliases of a functional op, which its results are copied into.
  c10::SmallVector<at::Tensor, 1> out_aliases;
  if (replayable) {
    stack.assign(replay_stack.begin(), replay_stack.end());
  } else {
    stack = std::move(args);
    for (const Slot& slot : slots) stack[slot.index] = aliasOf(slot);
    if (out_variant) {
      for (size_t k = 0; k < outputs.size(); ++k) stack.push_back(outputAlias(k));
    } else if (copy_results) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        const bool single = !outputs[k].empty() && !output_is_list[k];
        out_aliases.push_back(single ? aliasFor(outputs[k][0], false) : at::Tensor());
      }
    }
  }
  // CPU's kernel itself, without computing dispatch keys: the stack's tensors
  // are CPU aliases (tensor_ref.h), autograd and Python keys are excluded
  // (CpuKernelScope), and the conjugate and negative fallbacks, which rank
  // above the backend, ran on the spyre call already (a bit an alias still
  // carries is one the op's kernel reads itself).
  cpu_op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &stack);
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
      } else if (replayable) {
        copyResult(outputs[k][0], stack[k].toTensor(), replay_outputs[k].toTensor());
      } else {
        copyResult(outputs[k][0], stack[k].toTensor(), out_aliases[k]);
      }
    }
  }
  if (to_dl16) roundWrites(written);
  stack.clear();  // results die now, not at the next node
  // The arguments' buffer goes back to the work, freed with it (by the host).
  if (!replayable) args = std::move(owned);
}

namespace {
std::atomic<QueuedOp*> g_retired{nullptr};
std::atomic<int64_t> g_retired_count{0};

// The calling host thread's cleared ops; freed with the thread.
struct OpPool {
  std::vector<QueuedOp*> free;
  int64_t made = 0;
  ~OpPool() {
    for (QueuedOp* op : free) delete op;
  }
};
OpPool& threadOpPool() {
  thread_local OpPool pool;
  return pool;
}

// Back to a fresh op's state, keeping the capacity of its vectors and its
// aliases (whose memory the next run re-points).
void clearForReuse(QueuedOp& op) {
  op.args.clear();
  op.slots.clear();
  op.outputs.clear();
  op.output_is_list.clear();
  op.out_variant = op.copy_results = op.on_engine = op.contracts = false;
  op.replayable = op.result_mismatch = false;
  op.replay_kernel.reset();
  op.may_fork_team = true;
  op.num_threads = 0;
  op.next_retired = nullptr;
}

void recycle(QueuedOp* op) {
  OpPool& pool = threadOpPool();
  if (pool.free.size() >= kMaxPooledOps) {
    delete op;
    return;
  }
  clearForReuse(*op);
  pool.free.push_back(op);
}
}  // namespace

QueuedOp* acquireQueuedOp(const c10::OperatorHandle& cpu_op) {
  OpPool& pool = threadOpPool();
  if (pool.free.empty()) {
    ++pool.made;
    return new QueuedOp(cpu_op);
  }
  QueuedOp* op = pool.free.back();
  pool.free.pop_back();
  op->cpu_op = cpu_op;
  return op;
}

void retireToHost(QueuedOp* work) {
  g_retired_count.fetch_add(1, std::memory_order_relaxed);
  QueuedOp* head = g_retired.load(std::memory_order_relaxed);
  do {
    work->next_retired = head;
  } while (!g_retired.compare_exchange_weak(head, work, std::memory_order_release,
                                            std::memory_order_relaxed));
}

void freeRetiredWork() {
  if (g_retired.load(std::memory_order_relaxed) == nullptr) return;
  QueuedOp* work = g_retired.exchange(nullptr, std::memory_order_acquire);
  while (work != nullptr) {
    QueuedOp* next = work->next_retired;
    recycle(work);
    g_retired_count.fetch_sub(1, std::memory_order_relaxed);
    work = next;
  }
}

std::function<void()> ownedByGraph(QueuedOp* work) {
  std::shared_ptr<QueuedOp> owner(work, [](QueuedOp* op) { delete op; });
  return [owner = std::move(owner)] { owner->run(); };
}

int64_t retiredWorkCount() { return g_retired_count.load(std::memory_order_relaxed); }

int64_t queuedOpsMade() { return threadOpPool().made; }

void addSlot(QueuedOp& work, int index, const c10::IValue& v) {
  QueuedOp::Slot& slot = work.slots.emplace_back();
  slot.index = index;
  slot.kind = QueuedOp::Slot::Kind::Tensor;
  auto add = [&](const at::Tensor* t) {
    std::optional<TensorRef>& ref = slot.refs.emplace_back();
    if (t != nullptr && t->defined()) ref.emplace().capture(*t);
  };
  if (v.isTensor()) {
    add(&v.toTensor());
  } else if (v.isTensorList()) {
    slot.kind = QueuedOp::Slot::Kind::TensorList;
    for (const at::Tensor& t : v.toTensorList()) add(&t);
  } else {
    slot.kind = QueuedOp::Slot::Kind::OptionalTensorList;
    for (const c10::IValue& e : v.toListRef()) add(e.isTensor() ? &e.toTensor() : nullptr);
  }
}

void recordUses(const Stack& args, const SpyreStream& stream) {
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) { recordUse(t, stream); });
  }
}

ScratchVerdict verifyPlan(Plan& plan, QueuedOp& work) {
  using Scratch = QueuedOp::Scratch;
  // Not the user's work: profiles (Kineto, legacy) show only the real call.
  const at::DisableRecordFunctionGuard unrecorded;
  std::vector<c10::Warning> warnings;
  if (!verifiedSignatures().contains(*plan.signature)) {
    if (plan.out_variant) {
      // An out= kernel converts (or resizes) into outputs that are not what
      // it would return: compare the functional op's results first.
      QueuedOp functional = work;
      functional.cpu_op = *plan.functional_op;
      functional.out_variant = false;
      functional.copy_results = true;
      std::vector<c10::Warning> ignored;
      if (functional.runOnScratch(ignored) == Scratch::Mismatch) return ScratchVerdict::RunSynchronously;
    }
    Scratch result = work.runOnScratch(warnings);
    if (result == Scratch::Mismatch) return ScratchVerdict::RunSynchronously;
    if (result != Scratch::Ok || (!warnings.empty() && plan.out_variant)) {
      if (!plan.out_variant) return ScratchVerdict::RunAtCall;
      plan.out_variant = work.out_variant = false;
      plan.copy_results = work.copy_results = true;
      plan.cpu_op = plan.functional_op;
      work.cpu_op = *plan.functional_op;
      plan.signature = std::make_shared<const std::string>(
          c10::toString(plan.cpu_op->operator_name()) + *plan.dtypes);
      warnings.clear();
      if (!verifiedSignatures().contains(*plan.signature)) {
        result = work.runOnScratch(warnings);
        if (result == Scratch::Mismatch) return ScratchVerdict::RunSynchronously;
        if (result != Scratch::Ok) return ScratchVerdict::RunAtCall;
      }
    }
  }
  for (c10::Warning& warning : warnings) {
    c10::warn(warning);
    plan.warnings.push_back(std::move(warning));
  }
  plan.verified = true;
  verifiedSignatures().add(*plan.signature);
  return ScratchVerdict::Queue;
}

}  // namespace spyre::launch
