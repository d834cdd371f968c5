// A one-shot completion state: one event record, or one gate.
//
// Streams that reach a wait on an incomplete state park on it instead of
// holding an engine; complete() resumes them. Host threads sleep on it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "flex/flex.hpp"

namespace flex::detail {

class Completion {
 public:
  // True when already complete. Otherwise parks `stream`: complete() resumes it
  // with `token` (which names the operation it was parked at).
  // Lock order: the stream's mutex, then this state's.
  bool passOrPark(RuntimeStream::Impl* stream, uint64_t token);

  // Marks the state complete at `timestamp_ns`, wakes host waiters and resumes
  // parked streams. Later calls do nothing. Called without any stream lock held.
  void complete(int64_t timestamp_ns);

  bool isComplete() const { return done_.load(std::memory_order_acquire); }
  // Valid once isComplete().
  int64_t timestampNs() const { return timestamp_ns_; }
  // The card time model's timestamp of an event record, set when it is
  // launched (card_clock.hpp); -1: not modeled.
  void setModeledNs(int64_t ns) { modeled_ns_.store(ns, std::memory_order_relaxed); }
  int64_t modeledNs() const { return modeled_ns_.load(std::memory_order_relaxed); }

  // Sleeps until complete.
  void hostWait() const;
  size_t parkedStreams() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  std::atomic<bool> done_{false};
  int64_t timestamp_ns_ = 0;
  std::atomic<int64_t> modeled_ns_{-1};
  std::vector<std::pair<RuntimeStream::Impl*, uint64_t>> parked_;
};

}  // namespace flex::detail
