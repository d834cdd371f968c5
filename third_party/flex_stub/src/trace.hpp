// Records of executed operations, for two independent consumers: the Chrome
// trace of FLEX_STUB_TRACE / flex::test (trace.cpp) and the activity records
// of flex/activity.hpp (activity.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "flex/flex.hpp"
#include "op.hpp"

namespace flex::detail::trace {

// Bit set of the consumers recording now.
enum Consumer : unsigned { kChromeTrace = 1u, kActivity = 2u };
extern std::atomic<unsigned> g_consumers;

// The only cost of recording while it is off: one relaxed load.
inline bool enabled() { return g_consumers.load(std::memory_order_relaxed) != 0; }
inline bool chromeTraceEnabled() {
  return (g_consumers.load(std::memory_order_relaxed) & kChromeTrace) != 0;
}
inline bool activityEnabled() {
  return (g_consumers.load(std::memory_order_relaxed) & kActivity) != 0;
}

// At enqueue, on the launching thread: fills op.launch when activities are
// recorded. `launch_start_ns` is when the launch call began.
void stampLaunch(Op& op, int64_t launch_start_ns);

// An operation finished (or a wait released) on `stream`. With the card time
// model the operation's modeled times replace `start_ns` / `end_ns`.
void record(const RuntimeStream::Impl& stream, const Op& op, int64_t start_ns, int64_t end_ns,
            bool failed = false);

// Chrome trace: timestamps are written relative to `origin_ns` (the host
// clock's now, or the modeled host time with FLEX_STUB_TIMING=card).
void start(int64_t origin_ns);
// Stops recording and writes what was recorded as Chrome trace JSON (pid = `card`).
// Returns the number of operations written.
size_t stopAndWrite(const std::string& path, int card);

// Activity records (activity.cpp).
void recordActivity(const RuntimeStream::Impl& stream, const Op& op, int64_t start_ns,
                    int64_t end_ns, bool failed);

}  // namespace flex::detail::trace
