// A compute launch that carries its card cost (flex::WorkCost) for the card
// time model (FLEX_STUB_TIMING=card, docs/timing.md). Kept out of stream.h:
// only the launch path's card-timing branch needs it.
#pragma once

#include <cstddef>
#include <functional>

#include <flex/flex.hpp>

#include "runtime/stream.h"

namespace spyre {

// SpyreStream::launchCompute(CheckedDevice, ...) with `cost`. A launch recorded
// into a graph capture drops the cost (the node is priced from `bytes`).
void launchComputeWithCost(const SpyreStream& stream, CheckedDevice device,
                           std::function<void()> fn, const char* name, size_t bytes,
                           const flex::WorkCost& cost, const ComputeRelease* release = nullptr);

}  // namespace spyre
