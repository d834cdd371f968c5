// Metadata inference for the launch path (docs/tensors.md, "Compute on
// streams"): runs an op on meta tensors with C++ meta kernels.
//
// torch 2.13 replaces the C++ Meta kernels of ~630 aten ops (mm, add, gelu,
// softmax, sum, index, ...) with Python ones at `import torch`
// (torch/_meta_registrations.py). Calling those from C++ enters Python, and
// the first of them imports sympy (torch._check imports
// torch.fx.experimental.symbolic_shapes) or torch._dynamo (torch._refs
// kernels are wrapped in torch._disable_dynamo): 500-800 modules, seconds.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace spyre {

// Calls `op` on the meta arguments of `stack`, as op.callBoxed would, but
// every Meta dispatch inside it (the op's and the ops its composite kernel
// calls) uses, in order: the op's C++ Meta kernel (at::meta::, also where
// Python replaced it); one written here for ops with no C++ meta kernel
// (meta_rules.h: relu, where, var, native_batch_norm, ...); the op's C++
// CompositeExplicitAutograd kernel; the Python meta kernel only for ops that
// have none of these (~255, e.g. roll, index_select).
void callMeta(const c10::OperatorHandle& op, torch::jit::Stack& stack);

// For the thread mode key's fallback (thread_mode.h): whether the thread is
// in callMeta, and the routing above for one dispatch.
bool routingMeta();
void routeMeta(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack);

}  // namespace spyre
