// The synchronous path: ops that cannot be queued (data-dependent output
// shapes, host values, no meta kernel, random ops, ops outside the aten
// namespace, plans whose CPU results differ from their meta kernel's) run at
// the call, on the calling thread (aten/launch.h).
//
// Contract: the current stream is waited for, then the CPU kernel runs over
// CPU aliases of the arguments' device memory; the op's results replace its
// arguments on the stack as spyre tensors.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace spyre::launch {

// Runs `op` (its arguments from `first` on the stack) at the call on device
// `device`, whose current stream it orders against.
void runSynchronously(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first,
                      c10::DeviceIndex device);

}  // namespace spyre::launch
