// The state of the process's one context (context.cpp).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "card_clock.hpp"
#include "flex/flex.hpp"
#include "memory.hpp"
#include "scheduler.hpp"

namespace flex {

// The context's owning pointer to a stream (RuntimeStream's destructor is
// private: only the context may destroy a stream, and it never does while the
// process runs).
struct StreamDeleter {
  void operator()(RuntimeStream* stream) const { delete stream; }
};

struct RuntimeContext::Impl {
  Impl(int device, int card, const detail::SchedulerConfig& scheduler_config,
       size_t memory_bytes, std::string trace_path);

  const int device;
  const int card;
  const std::string trace_path;  // FLEX_STUB_TRACE, written at exit
  detail::Scheduler scheduler;
  detail::Memory memory;
  // FLEX_STUB_TIMING=card: the modeled timeline; null for host timing.
  const std::unique_ptr<detail::CardClock> card_clock;

  std::mutex streams_mutex;
  std::vector<std::unique_ptr<RuntimeStream, StreamDeleter>> streams;  // index == stream id
  RuntimeStream* default_stream = nullptr;
  std::atomic<int> failed_streams{0};
};

}  // namespace flex
