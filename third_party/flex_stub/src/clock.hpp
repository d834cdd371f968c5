// The one clock of the emulation: device timestamps, deadlines and trace times.
#pragma once

#include <chrono>
#include <cstdint>

namespace flex::detail {

using Clock = std::chrono::steady_clock;

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace flex::detail
