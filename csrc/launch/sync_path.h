// The synchronous path: ops that cannot be queued (data-dependent output
// shapes, host values, no meta kernel, random ops, ops outside the aten
// namespace, plans whose CPU results differ from their meta kernel's) run at
// the call, on the calling thread (launch/launch.h).
//
// Contract: the host never touches device memory, and no write overtakes work
// already queued on the block it writes. The spyre tensors an op reads arrive
// in host copies by device-to-host copies queued on the current stream, which
// the host then waits for; the CPU kernel runs on the calling thread over
// those copies. A result reaches its device block (a new tensor's, an out=
// argument's grown in stream order, or an argument written in place) by a
// copy queued on the current stream, like every other write, so the stream
// sanitizer and the hazard tracker see it: a block freed on the stream is
// handed to the next allocation at once, so work queued before that free (by
// any thread) may still write it, and the result must land after that work.
// The op returns without waiting for the copy, as on CUDA.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "runtime/runtime.h"

namespace spyre::launch {

// Runs `op` (its arguments from `first` on the stack) at the call on device
// `device` (checked by this op), whose current stream it orders against.
void runSynchronously(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first,
                      CheckedDevice device);

}  // namespace spyre::launch
