// Plans: what the launch path knows about an op call before it runs
// (launch/launch.h, steps 2-3). A plan comes from the op's meta kernel, run on
// meta tensors with the arguments' metadata, and is cached per thread by the
// exact argument metadata (launch/plan_key.h): a loop pays for it once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/DimVector.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include "runtime/runtime.h"

namespace spyre::launch {

using torch::jit::Stack;

// Plans keep their vectors inline (up to 5 dimensions, one output): a first
// pass over new shapes copies a plan per shape.
struct Layout {
  c10::DimVector sizes;
  c10::DimVector strides;
  int64_t offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;

  static Layout of(const at::Tensor& t) {
    if (!t.defined()) return {};  // dtype Undefined: an output the op did not compute
    return {c10::DimVector(t.sizes().begin(), t.sizes().end()),
            c10::DimVector(t.strides().begin(), t.strides().end()), t.storage_offset(),
            t.scalar_type()};
  }
  bool defined() const { return dtype != c10::ScalarType::Undefined; }
};

struct OutputSpec {
  enum class Kind { New, Argument, View } kind = Kind::New;
  int arg = -1;       // Argument / View: the argument it is, or views
  bool list = false;  // a Tensor[] return
  c10::SmallVector<Layout, 1> layouts;
};

struct Plan {
  bool synchronous = false;
  std::optional<c10::OperatorHandle> cpu_op;  // what runs on the engine
  bool out_variant = false;   // cpu_op is the out= variant: outputs appended
  bool copy_results = false;  // cpu_op is functional: results copied into outputs
  bool computes = true;       // false for pure views (nothing to launch)
  bool contracts = false;     // a matmul-class or convolution op (work_cost.h)
  c10::SmallVector<OutputSpec, 1> outputs;
  std::vector<std::pair<int, Layout>> resizes;  // out= arguments the meta kernel resized
  std::optional<c10::OperatorHandle> functional_op;  // the op itself
  // Shared with the plans made from this one for other shapes (templatePlan):
  // a new shape copies pointers, not strings.
  std::shared_ptr<const std::string> dtypes;     // its tensors' dtypes
  std::shared_ptr<const std::string> signature;  // cpu_op and dtypes (verified once)
  bool verified = false;
  // The dtype a Python number argument (a wrapped 0-dim CPU tensor) is given
  // at the launch, for the ops whose CPU kernel would convert it to that
  // dtype itself at every call (scalarTargetOf()); Undefined: as it came.
  c10::ScalarType scalar_to = c10::ScalarType::Undefined;
  // Whether the kernel may fork its engine's team (QueuedOp::mayForkTeam()):
  // a function of the shapes, so found at the plan's first launch. -1: not yet.
  int8_t may_fork_team = -1;
  std::vector<c10::Warning> warnings;  // what the meta kernel warned: CPU warns on every call
};

// Collects the warnings of a meta run, so that every call can repeat them.
class WarningCollector final : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  std::vector<c10::Warning> warnings;
};

// A handler that drops warnings (an engine's: nobody would hear them).
c10::WarningHandler& silentWarnings();

// The argument a return aliases (same alias set), or -1.
int aliasedArgument(const c10::FunctionSchema& schema, const c10::Argument& ret);

// The plan for a call of `op` with `args`, whose metadata is `key`: cached
// per thread (the last hit is checked first: a loop repeats one call). A plan
// that cannot be made (no meta kernel, an error, results that are not
// tensors) is synchronous.
std::shared_ptr<Plan> planFor(const c10::OperatorHandle& op, const Stack& args,
                              c10::ArrayRef<int64_t> key);

// How this thread's plans were made, for tests: by a meta kernel run, or
// from a pointwise template (another shape's plan, its sizes changed).
struct PlanCounts {
  int64_t meta_runs = 0;
  int64_t from_template = 0;
};
PlanCounts planCounts();

// A new spyre tensor of this layout (offset ignored) on `device`.
at::Tensor emptySpyre(const Layout& layout, CheckedDevice device);
// Give `t` the sizes and strides an out= kernel would (growing its storage
// in stream order when needed).
void restride(const at::Tensor& t, const Layout& layout);
// A view of `base` with this layout.
at::Tensor viewOf(const at::Tensor& base, const Layout& layout);

}  // namespace spyre::launch
