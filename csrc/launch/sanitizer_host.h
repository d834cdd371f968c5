// The host side of copies for the stream sanitizer (runtime/sanitizer.h,
// docs/sanitizer.md "The host side of copies"): the pinned host bytes of a
// non_blocking copy, and the CPU operations that touch them before the host
// waited for the copy.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "runtime/sanitizer.h"

namespace spyre::sanitizer {

// A copy the caller does not wait for: adds its pinned host tensor's bytes
// (written by a D2H, read by an H2D) to `out`, and starts checking the CPU
// operations of the calling thread. Nothing for pageable memory (the caller
// waits) or outside Mode::Raise / Mode::Warn.
void addPendingHostSide(std::vector<Access>& out, const at::Tensor& src, const at::Tensor& dst);

// The thread mode key's fallback while the thread is not in metadata
// inference (thread_mode.h): checks a CPU operation's tensors against the
// pending host bytes, then runs it (the operations it calls unchecked).
void checkCpuOperation(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                       torch::jit::Stack* stack);

// A host access to a CPU tensor outside the dispatcher (numpy(), tolist()).
void checkHostTensor(const at::Tensor& t, const std::string& op, bool write);

}  // namespace spyre::sanitizer
