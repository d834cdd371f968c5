// The launch path's entry points (launch/launch.h): arguments
// (launch/op_arguments.h), the plan (launch/plan.h, keyed by launch/plan_key.h),
// outputs, then the work queued on the stream (launch/queued_op.h) or, for what
// cannot be queued, the synchronous path (launch/sync_path.h).
#include "launch/launch.h"

#include <algorithm>
#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/record_function.h>
#include <ATen/native/Resize.h>
#include <c10/util/MaybeOwned.h>

#include "launch/engine_team.h"
#include "launch/kernel_threads.h"
#include "launch/op_arguments.h"
#include "launch/plan.h"
#include "launch/plan_key.h"
#include "launch/sanitizer_accesses.h"
#include "launch/sync_path.h"
#include "launch/tensor_ref.h"
#include "launch/queued_op.h"
#include "launch/work_cost.h"
#include "runtime/capture.h"
#include "runtime/card_priced_launch.h"
#include "runtime/runtime.h"

namespace spyre {

using namespace launch;  // NOLINT: the entry points use every launch part

void verifySignature(const std::string& signature, const std::function<void()>& verify) {
  checkEngineTeamSetting();
  if (!verifiedSignatures().contains(signature)) {
    const at::DisableRecordFunctionGuard unrecorded;  // as in verifyPlan
    verify();
    verifiedSignatures().add(signature);
  }
}

namespace {

// The tensors of a borrowed stack (launchOpBorrowed), whose references were
// never counted: each leaves the launch released (uncounted), wherever it
// went (the arguments, an in-place op's return), or made owned (counted) for
// the synchronous path, which hands its stack to CPU's kernel.
class Borrowed {
 public:
  Borrowed(bool active, Stack& args, c10::SmallVector<c10::IValue, 2>& returns)
      : args_(args), returns_(returns) {
    if (!active) return;
    for (const c10::IValue& v : args) {
      if (v.isTensor()) impls_.push_back(v.toTensor().unsafeGetTensorImpl());
    }
  }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed() {
    for (c10::IValue& v : args_) release(v);
    for (c10::IValue& v : returns_) release(v);
  }
  bool isBorrowed(const c10::IValue& v) const {
    return v.isTensor() &&
           std::find(impls_.begin(), impls_.end(), v.toTensor().unsafeGetTensorImpl()) !=
               impls_.end();
  }
  // Another uncounted reference to the borrowed `v`.
  static c10::IValue borrow(const c10::IValue& v) {
    return c10::MaybeOwnedTraits<at::Tensor>::createBorrow(v.toTensor());
  }
  // The arguments' tensors counted, for a path that gives them away; the
  // borrowed returns dropped.
  void own() {
    for (c10::IValue& v : args_) {
      if (isBorrowed(v)) {
        at::Tensor owned = v.toTensor();  // counted
        release(v);
        v = std::move(owned);
      }
    }
    for (c10::IValue& v : returns_) release(v);
    impls_.clear();
  }

 private:
  void release(c10::IValue& v) {
    if (!isBorrowed(v)) return;
    at::Tensor t = std::move(v).toTensor();
    c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(t);
    v = c10::IValue();
  }
  c10::SmallVector<c10::TensorImpl*, 4> impls_;
  Stack& args_;
  c10::SmallVector<c10::IValue, 2>& returns_;
};

void launchImpl(const c10::OperatorHandle& op, const c10::OperatorHandle& compute_op, Stack* stack,
                bool borrowed) {
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  // The op's one device check: what follows uses the checked index.
  const CheckedDevice device = [&] {
    try {
      return checkDevices(op, stack, first);
    } catch (...) {
      if (borrowed) {
        for (size_t i = first; i < stack->size(); ++i) {
          if ((*stack)[i].isTensor()) {
            at::Tensor t = std::move((*stack)[i]).toTensor();
            c10::MaybeOwnedTraits<at::Tensor>::destroyBorrow(t);
          }
        }
      }
      throw;
    }
  }();
  // The arguments, moved off the stack (the returns take their place). The
  // synchronous path takes them from the stack: they are put back first.
  Stack args(std::make_move_iterator(stack->begin() + static_cast<std::ptrdiff_t>(first)),
             std::make_move_iterator(stack->end()));
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  c10::SmallVector<c10::IValue, 2> returns;
  Borrowed borrows(borrowed, args, returns);  // first: whatever raises below releases them
  checkEngineTeamSetting();
  freeRetiredWork();
  auto runSynchronouslyOnArgs = [&] {
    borrows.own();
    stack->insert(stack->end(), std::make_move_iterator(args.begin()),
                  std::make_move_iterator(args.end()));
    runSynchronously(compute_op, stack, first, device);
  };

  KeyBuilder key(compute_op);
  bool encodable = true;
  for (const c10::IValue& v : args) {
    if (!key.add(v)) {
      encodable = false;
      break;
    }
  }
  if (!encodable) {
    runSynchronouslyOnArgs();
    return;
  }
  const std::shared_ptr<Plan> plan = planFor(compute_op, args, key.words());
  if (plan->synchronous) {
    runSynchronouslyOnArgs();
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
  // Pooled: released (given back to the pool) on every path that does not
  // hand it to the runtime or a graph.
  QueuedOp* work = acquireQueuedOp(*plan->cpu_op);
  struct Release {
    QueuedOp*& work;
    ~Release() {
      if (work != nullptr) retireToHost(work);
    }
  } release{work};
  work->out_variant = plan->out_variant;
  work->copy_results = plan->copy_results;
  work->num_threads = kernelThreads();
  work->contracts = plan->contracts;
  size_t bytes = 0;
  for (const OutputSpec& spec : plan->outputs) {
    c10::SmallVector<TensorRef, 1>& refs = work->outputs.emplace_back();
    c10::IValue value;
    if (spec.kind == OutputSpec::Kind::Argument) {
      // A borrowed argument is returned uncounted (dropped at the end: the
      // caller returns its own reference).
      value = borrowed ? Borrowed::borrow(args[spec.arg]) : args[spec.arg];
    } else if (spec.kind == OutputSpec::Kind::View) {
      value = viewOf(args[spec.arg].toTensor(), spec.layouts[0]);
    } else if (!spec.list) {
      at::Tensor t;  // undefined: an output the op did not compute
      if (spec.layouts[0].defined()) {
        t = emptySpyre(spec.layouts[0], device);
        bytes += t.nbytes();
        refs.emplace_back().capture(t);
      }
      value = std::move(t);
    } else {
      c10::List<at::Tensor> list;
      for (const Layout& layout : spec.layouts) {
        if (!layout.defined()) {
          list.push_back(at::Tensor());
          continue;
        }
        at::Tensor t = emptySpyre(layout, device);
        bytes += t.nbytes();
        refs.emplace_back().capture(t);
        list.push_back(std::move(t));
      }
      value = std::move(list);
    }
    work->output_is_list.push_back(spec.list);
    returns.push_back(std::move(value));
  }
  if (plan->computes) {
    // What the op reads and writes, described now (the arguments move into
    // the work), checked by the sanitizer with the launch itself.
    std::optional<std::vector<sanitizer::Access>> accesses;
    if (sanitizer::accessesWanted()) {
      c10::SmallVector<c10::IValue, 2> fresh;  // new outputs: written
      for (size_t k = 0; k < plan->outputs.size(); ++k) {
        const OutputSpec::Kind kind = plan->outputs[k].kind;
        if (kind != OutputSpec::Kind::Argument && kind != OutputSpec::Kind::View) {
          fresh.push_back(returns[k]);
        }
      }
      accesses = sanitizer::opAccesses(op.schema(), args, fresh);
    }
    // Generic: without the sanitizer no std::function is made per op.
    auto checkedLaunch = [&](auto&& launch) {
      if (accesses) {
        sanitizer::onLaunch(stream.id(), sanitizer::opName(op), *accesses, launch);
      } else {
        launch();
      }
    };
    // The card time model prices the kernel from its shapes (before the
    // arguments move into the work).
    std::optional<flex::WorkCost> cost;
    if (C10_UNLIKELY(cardTiming())) cost = workCost(op.schema(), args, returns);
    // Room for the out= variant's outputs too: the engine appends them.
    work->args.reserve(args.size() + plan->outputs.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (holdsTensors(args[i])) {
        addSlot(*work, static_cast<int>(i), args[i]);
        work->args.emplace_back();
      } else if (args[i].isDevice() && args[i].toDevice().is_privateuseone()) {
        // A factory's device: the CPU kernel makes a host tensor (copied into
        // the output), not a spyre one through the launch path again.
        work->args.emplace_back(c10::Device(c10::kCPU));
      } else if (plan->verified) {
        work->args.push_back(std::move(args[i]));  // no synchronous fallback needs it
      } else {
        work->args.push_back(args[i]);
      }
    }
    if (plan->scalar_to != c10::ScalarType::Undefined) {
      for (QueuedOp::Slot& slot : work->slots) {
        for (auto& ref : slot.refs) {
          if (ref) ref->convertScalar(plan->scalar_to);
        }
      }
    }
    recordUses(args, stream);
    if (C10_UNLIKELY(plan->may_fork_team < 0)) plan->may_fork_team = work->mayForkTeam();
    work->may_fork_team = plan->may_fork_team != 0;
    const char* name = compute_op.schema().name().c_str();
    const ScratchVerdict verdict = plan->verified ? ScratchVerdict::Queue : verifyPlan(*plan, *work);
    if (verdict == ScratchVerdict::RunSynchronously) {
      plan->synchronous = true;
      runSynchronouslyOnArgs();
      return;
    }
    if (verdict == ScratchVerdict::RunAtCall) {
      // The kernel failed on scratch data: run it on the real data at the
      // call, so whatever it raises reaches the caller.
      if (C10_UNLIKELY(capture::anyCapture())) {
        capture::refuseIfCapturing(stream.id(),
                                   compute_op.schema().name() +
                                       " (its first call runs at the call: run it once before "
                                       "capturing)");
      }
      // On the stream like any device work (the host never touches device
      // memory), waited for; its warnings and its error reach the caller.
      // What the op reports lives in a block the op shares: if the wait
      // raises (an earlier failure), the op never writes into a dead frame.
      struct Outcome {
        std::exception_ptr failure;
        WarningCollector collector;
      };
      auto outcome = std::make_shared<Outcome>();
      // Owned by the closure (the first call of a plan: allocating is fine).
      std::shared_ptr<QueuedOp> owned(std::exchange(work, nullptr), &retireToHost);
      auto run = [work = owned, outcome] {
        const c10::WarningUtils::WarningHandlerGuard collect(&outcome->collector);
        try {
          work->run();
        } catch (const std::exception&) {
          outcome->failure = std::current_exception();
        }
      };
      // Priced as every later call is: the price depends on the shapes only.
      checkedLaunch([&] {
        if (C10_UNLIKELY(cost.has_value())) {
          launchComputeWithCost(stream, device, std::move(run), name, bytes, *cost);
        } else {
          stream.launchCompute(device, std::move(run), name, bytes);
        }
      });
      stream.synchronize();
      for (const c10::Warning& warning : outcome->collector.warnings) c10::warn(warning);
      if (outcome->failure) {
        if (!owned->result_mismatch) std::rethrow_exception(outcome->failure);
        plan->synchronous = true;  // its results are not what the meta kernel said
        runSynchronouslyOnArgs();
        return;
      }
      plan->verified = true;
      verifiedSignatures().add(*plan->signature);
    } else {
      work->on_engine = true;
      // The closure holds one raw pointer: std::function keeps it inline. It
      // runs the op once and gives it back to the host (also when it raises:
      // the stream reports the error); an op the runtime discards unrun is
      // given back by on_discard.
      QueuedOp* queued = work;
      auto run = [queued] {
        struct Retire {
          QueuedOp* op;
          ~Retire() { retireToHost(op); }
        } retire{queued};
        queued->run();
      };
      // A captured op runs once per replay, on a stack built when it is
      // recorded (under the capture's lock: a stream may join another
      // thread's capture until then), and the graph owns it from then on.
      bool recorded = false;
      ComputeRelease owner;
      owner.on_discard = [](void* op) { retireToHost(static_cast<QueuedOp*>(op)); };
      owner.arg = queued;
      owner.record_as = [queued, &recorded] {
        queued->prepareReplay();
        recorded = true;
        return ownedByGraph(queued);
      };
      // From here the runtime, or the graph, gives the op back: unless the
      // launch raises before either took it.
      work = nullptr;
      bool handed = false;
      try {
        checkedLaunch([&] {
          if (C10_UNLIKELY(cost.has_value())) {
            launchComputeWithCost(stream, device, std::move(run), name, bytes, *cost, &owner);
          } else {
            stream.launchCompute(device, std::move(run), name, bytes, &owner);
          }
          handed = true;
        });
      } catch (...) {
        if (!recorded && !handed) retireToHost(queued);
        throw;
      }
    }
  }
  if (!borrowed) {
    for (c10::IValue& r : returns) stack->push_back(std::move(r));
  } else {
    // Borrowed returns become None when `borrows` is destroyed, after this.
    for (c10::IValue& r : returns) {
      stack->push_back(borrows.isBorrowed(r) ? c10::IValue() : std::move(r));
    }
  }
}

}  // namespace

void launchOpComputedBy(const c10::OperatorHandle& op, const c10::OperatorHandle& compute_op,
                Stack* stack) {
  launchImpl(op, compute_op, stack, /*borrowed=*/false);
}

void launchOp(const c10::OperatorHandle& op, Stack* stack) {
  launchImpl(op, op, stack, /*borrowed=*/false);
}

void launchOpBorrowed(const c10::OperatorHandle& op, Stack* stack) {
  launchImpl(op, op, stack, /*borrowed=*/true);
}

}  // namespace spyre
