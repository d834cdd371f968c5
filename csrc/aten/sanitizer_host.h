// The host side of copies for the stream sanitizer (runtime/sanitizer.h,
// docs/sanitizer.md "The host side of copies"): the pinned host bytes of a
// non_blocking copy, and the CPU operations that touch them before the host
// waited for the copy.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "runtime/sanitizer.h"

namespace spyre::sanitizer {

// A copy the caller does not wait for: adds its pinned host tensor's bytes
// (written by a D2H, read by an H2D) to `out`, and starts checking the CPU
// operations of the calling thread. Nothing for pageable memory (the caller
// waits) or outside Mode::Raise / Mode::Warn.
void addPendingHostSide(std::vector<Access>& out, const at::Tensor& src, const at::Tensor& dst);

// A host access to a CPU tensor outside the dispatcher (numpy(), tolist()).
void checkHostTensor(const at::Tensor& t, const std::string& op, bool write);

}  // namespace spyre::sanitizer
