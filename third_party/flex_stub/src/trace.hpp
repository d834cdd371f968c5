// Chrome trace of executed operations (trace.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flex/flex.hpp"
#include "op.hpp"

namespace flex::detail::trace {

extern std::atomic<bool> g_enabled;

// The only cost of tracing while it is off: one relaxed load.
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

void start();
void record(const RuntimeStream::Impl& stream, const Op& op, int64_t start_ns, int64_t end_ns);
// Stops recording and writes what was recorded as Chrome trace JSON (pid = `card`).
// Returns the number of operations written.
size_t stopAndWrite(const std::string& path, int card);

}  // namespace flex::detail::trace
