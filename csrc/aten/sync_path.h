// The synchronous path: ops that cannot be queued (data-dependent output
// shapes, host values, no meta kernel, random ops, ops outside the aten
// namespace, plans whose CPU results differ from their meta kernel's) run at
// the call, on the calling thread (aten/launch.h).
//
// Contract: no host write may overtake work already queued on the block it
// writes. The current stream is waited for (the host reads the arguments),
// then the CPU kernel runs on the calling thread over CPU aliases of the
// arguments' device memory, writing its results into host memory. A result
// reaches its device block (a new tensor's, or an out= argument's, grown in
// stream order) by a copy queued on the current stream, like every other
// write: a block freed on the stream is handed to the next allocation at
// once, so work queued before that free (by any thread) may still write it,
// and the result must land after that work. The op returns without waiting
// for the copy, as on CUDA. Arguments the op writes in place (a kernel
// writing through its CPU alias) are written at the call, after the wait:
// only work queued since then by another thread could race with it, which
// is that program's race, as on CUDA.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace spyre::launch {

// Runs `op` (its arguments from `first` on the stack) at the call on device
// `device`, whose current stream it orders against.
void runSynchronously(const c10::OperatorHandle& op, torch::jit::Stack* stack, size_t first,
                      c10::DeviceIndex device);

}  // namespace spyre::launch
