// QueuedOp: one launched op as an engine runs it, and the verification of a
// kernel and dtype signature on scratch data before its first launch
// (launch/launch.h, step 4).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include "launch/plan.h"
#include "launch/replay_kernel.h"
#include "launch/verified_signatures.h"
#include "launch/tensor_ref.h"
#include "runtime/stream.h"

namespace spyre::launch {

// One launched op, as the engine sees it: the arguments with every tensor
// replaced by a TensorRef, and the outputs to write. Pooled (acquireQueuedOp):
// a reused op keeps its vectors' capacity and its CPU alias tensors, so the
// usual op allocates nothing on the host or the engine.
struct QueuedOp {
  struct Slot {
    int index;  // argument position
    enum class Kind { Tensor, TensorList, OptionalTensorList } kind;
    c10::SmallVector<std::optional<TensorRef>, 1> refs;
  };
  c10::OperatorHandle cpu_op;
  bool out_variant;
  bool copy_results;
  Stack args;  // tensors replaced by None
  c10::SmallVector<Slot, 3> slots;
  c10::SmallVector<c10::SmallVector<TensorRef, 1>, 1> outputs;  // per return (New ones only)
  c10::SmallVector<bool, 2> output_is_list;
  int num_threads;
  bool on_engine = false;
  bool contracts = false;  // a matmul-class or convolution kernel (Plan::contracts)
  // Captured into a graph (prepareReplay()): run() calls the kernel on a copy
  // of the stack made at capture, CPU aliases included, once per replay. The
  // graph's memory never moves, so the aliases stay valid.
  bool replayable = false;
  Stack replay_stack;
  c10::SmallVector<c10::IValue, 1> replay_outputs;  // outputAlias(k), for copy_results
  // The node's kernel resolved at capture (replay_kernel.h), when it has one:
  // run() then runs only its loop. Shared: scratch runs copy the op.
  std::shared_ptr<ReplayKernel> replay_kernel;
  // Set by run() when a result of the functional op is not the output the
  // meta kernel described (its size or dtype): the meta kernel and CPU's
  // disagree, so the plan cannot be launched.
  bool result_mismatch = false;
  // Whether the engine team may fork for this op (Plan::may_fork_team).
  bool may_fork_team = true;
  // While retired (retireToHost): the next retired op.
  QueuedOp* next_retired = nullptr;
  explicit QueuedOp(const c10::OperatorHandle& op) : cpu_op(op) {}

  // The CPU aliases run() passes the kernel are the running thread's, made
  // once and re-pointed at each op's memory (TensorRef::repoint) when nothing
  // else holds them. `fresh`: new ones, never the thread's (a replay stack
  // keeps them for every replay).
  c10::IValue aliasOf(const Slot& slot, bool fresh = false);
  c10::IValue outputAlias(size_t k, bool fresh = false);

  enum class Scratch { Ok, Failed, Mismatch };

  // This work over zeroed host scratch memory of the same layout (tensors that
  // share memory share scratch): Ok when the kernel accepted it, Mismatch when
  // its results are not the outputs the meta kernel described.
  Scratch runOnScratch(std::vector<c10::Warning>& warnings) const;

  // out <- result, which must be what the meta kernel said (copy_ would
  // broadcast or convert it silently).
  void copyResult(const TensorRef& out, const at::Tensor& result);
  // The same into `alias`, out's CPU alias made earlier.
  void copyResult(const TensorRef& out, const at::Tensor& result, const at::Tensor& alias);

  // DLFloat16 numerics (device/numerics.h): rounds the outputs and the
  // `written` slots once the kernel ran, and reports what overflowed.
  void roundWrites(c10::ArrayRef<const Slot*> written) const;

  // Whether the kernel may fork the engine's OpenMP team (engine_team.h), from
  // its largest tensor: computed once per plan (Plan::may_fork_team).
  bool mayForkTeam() const;

  // Runs the CPU kernel over CPU aliases of the refs (on an engine when
  // on_engine). The arguments are moved out (run once) unless replayable.
  void run();
  // Makes this work replayable: the stack run() needs, built once.
  void prepareReplay();
};

// QueuedOps are pooled per host thread and given back by the host: memory
// allocated by the host and freed on an engine takes glibc's arena lock
// against the host's next allocations (neither thread's cache of free chunks
// serves the other). acquireQueuedOp() (host) takes a cleared op from the
// calling thread's pool (or makes one); retireToHost() (any thread, once the
// op will not run again) pushes it on a lock-free list without allocating;
// freeRetiredWork() (host, at each launch) clears the retired ops and puts
// them back in the calling thread's pool (at most kMaxPooledOps, enough for a
// host that runs a few hundred ops ahead of its engines; the rest are freed).
// An op recorded into a graph is never retired: the graph owns it
// (ownedByGraph()) and frees it with its nodes.
constexpr size_t kMaxPooledOps = 512;
QueuedOp* acquireQueuedOp(const c10::OperatorHandle& cpu_op);
void retireToHost(QueuedOp* work);
void freeRetiredWork();
// `work` as a graph's node keeps it: a closure that owns it and replays it.
std::function<void()> ownedByGraph(QueuedOp* work);
// Ops retired so far and not yet put back: for tests.
int64_t retiredWorkCount();
// Ops made by acquireQueuedOp() on this thread (not taken from its pool): for tests.
int64_t queuedOpsMade();

// Appends the slot of a tensor argument at `index` to `work`: its tensors as
// TensorRefs, built in place.
void addSlot(QueuedOp& work, int index, const c10::IValue& v);

// Every spyre argument's block is used by work queued on `stream`.
void recordUses(const Stack& args, const SpyreStream& stream);

// First call of a plan's kernel and dtypes: try it on scratch data. An out=
// variant that warns or fails there (some use `out` as scratch space and
// resize it) is replaced by the functional op plus a copy. What the launch
// then does with the op:
enum class ScratchVerdict {
  Queue,      // the kernel took the scratch data: queue it on an engine
  RunAtCall,  // it failed on scratch data: run it on the real data, waited for,
              // so that what it raises reaches the caller
  // CPU's results are not the outputs the meta kernel described
  // (native_layer_norm's statistics of a half input, native_batch_norm's when
  // not training): the op runs on the synchronous path, as CPU runs it.
  RunSynchronously,
};

ScratchVerdict verifyPlan(Plan& plan, QueuedOp& work);

}  // namespace spyre::launch
