// The launch path's entry points (launch/launch.h): arguments
// (launch/op_arguments.h), the plan (launch/plan.h, keyed by launch/plan_key.h),
// outputs, then the work queued on the stream (launch/queued_op.h) or, for what
// cannot be queued, the synchronous path (launch/sync_path.h).
#include "launch/launch.h"

#include <exception>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <ATen/native/Resize.h>

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

void launchOpComputedBy(const c10::OperatorHandle& op, const c10::OperatorHandle& compute_op,
                Stack* stack) {
  const size_t num_args = op.schema().arguments().size();
  const size_t first = stack->size() - num_args;
  // The op's one device check: what follows uses the checked index.
  const CheckedDevice device = checkDevices(op, stack, first);
  checkEngineTeamSetting();
  freeRetiredWork();
  // The arguments, moved off the stack (the returns take their place). The
  // synchronous path takes them from the stack: they are put back first.
  Stack args(std::make_move_iterator(stack->begin() + static_cast<std::ptrdiff_t>(first)),
             std::make_move_iterator(stack->end()));
  stack->erase(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  auto runSynchronouslyOnArgs = [&] {
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
  auto work = std::make_shared<QueuedOp>(*plan->cpu_op);
  work->out_variant = plan->out_variant;
  work->copy_results = plan->copy_results;
  work->num_threads = kernelThreads();
  work->contracts = plan->contracts;
  c10::SmallVector<c10::IValue, 2> returns;
  size_t bytes = 0;
  for (const OutputSpec& spec : plan->outputs) {
    c10::SmallVector<TensorRef, 1>& refs = work->outputs.emplace_back();
    c10::IValue value;
    if (spec.kind == OutputSpec::Kind::Argument) {
      value = args[spec.arg];
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
    recordUses(args, stream);
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
      auto run = [work, outcome] {
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
        if (!work->result_mismatch) std::rethrow_exception(outcome->failure);
        plan->synchronous = true;  // its results are not what the meta kernel said
        runSynchronouslyOnArgs();
        return;
      }
      plan->verified = true;
      verifiedSignatures().add(*plan->signature);
    } else {
      work->on_engine = true;
      // A captured op runs once per replay, on a stack built when it is
      // recorded (under the capture's lock: a stream may join another
      // thread's capture until then, and a run-once work replayed twice would
      // have lost its arguments).
      QueuedOp* recorded = work.get();
      const auto prepare = [recorded] { recorded->prepareReplay(); };
      // The closure is moved into the runtime, never copied. A replayable
      // work runs again at every replay; any other goes back to the host.
      auto run = [work = std::move(work)]() mutable {
        work->run();
        if (!work->replayable) retireToHost(std::move(work));
      };
      checkedLaunch([&] {
        if (C10_UNLIKELY(cost.has_value())) {
          launchComputeWithCost(stream, device, std::move(run), name, bytes, *cost, prepare);
        } else {
          stream.launchCompute(device, std::move(run), name, bytes, prepare);
        }
      });
    }
  }
  for (c10::IValue& r : returns) stack->push_back(std::move(r));
}

void launchOp(const c10::OperatorHandle& op, Stack* stack) {
  launchOpComputedBy(op, op, stack);
}

}  // namespace spyre
