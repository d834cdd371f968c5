// Short waits that fit the device: spin briefly, then park (docs/flex_stub.md,
// "Waits").
//
// A round trip to an engine that has just run an op takes microseconds; a
// futex sleep and a wake across cores costs several times that where an idle
// CPU halts. So a waiter first polls its condition: with a CPU pause for the first
// 200 ns (kPausePhase: a thread on the other core answers within that), then with
// sched_yield (a thread on the same core gets it), for at most its budget.
// Only then does it park on its condition variable. The budget bounds the CPU
// a wait can burn: an idle process spins for nothing.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "clock.hpp"

namespace flex::detail {

// Host waits on a stream or an event record.
constexpr std::chrono::nanoseconds kHostSpinBudget{50'000};
// An engine that ran out of work, before it sleeps (see Scheduler::linger).
constexpr std::chrono::nanoseconds kEngineLingerBudget{50'000};
// The pause phase of every spin.
constexpr std::chrono::nanoseconds kPausePhase{200};

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

// Polls `done` for up to `budget`; true as soon as it holds, false when the
// budget ran out (the caller then parks).
template <class Done>
bool spinUntil(Done&& done, std::chrono::nanoseconds budget) {
  if (done()) return true;
  const Clock::time_point start = Clock::now();
  const Clock::time_point pause_end = start + std::min(budget, kPausePhase);
  const Clock::time_point deadline = start + budget;
  for (;;) {
    for (int i = 0; i < 16; ++i) {  // a clock read per 16 polls
      if (done()) return true;
      cpuRelax();
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return done();
    if (now >= pause_end) std::this_thread::yield();
  }
}

}  // namespace flex::detail
