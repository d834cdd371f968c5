// A graph node's kernel resolved once, at capture: for the tensor arithmetic
// CPU implements with a TensorIterator (add, sub, mul, div of two tensors,
// out= or in place), the iterator CPU's structured kernel builds at every call
// is built once over the graph's memory, which never moves, and each replay
// runs only the kernel's loop: the DispatchStub CPU's kernel calls, so the
// same bits. Any other node replays through the boxed call (QueuedOp::run).
#pragma once

#include <memory>

#include <ATen/core/stack.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace spyre::launch {

class ReplayKernel {
 public:
  virtual ~ReplayKernel() = default;
  // The loop over the node's memory (within the caller's CpuKernelScope).
  virtual void run() = 0;
};

// The kernel of `op` over `stack` (the node's replay stack: CPU aliases, the
// out= tensors last), or nullptr when `op` is not one of the ops above or its
// iterator would cast an operand (the boxed call does that part each time).
std::unique_ptr<ReplayKernel> resolveReplayKernel(const c10::OperatorHandle& op,
                                                  const torch::jit::Stack& stack);

// Kernels resolveReplayKernel() has made in this process (tests).
int64_t replayKernelsResolved();

}  // namespace spyre::launch
