// Completion states: the one mechanism behind event records, event waits and gates.
#include "completion.hpp"

#include "context_impl.hpp"
#include "spin_wait.hpp"
#include "stream_impl.hpp"

namespace flex::detail {

bool Completion::passOrPark(RuntimeStream::Impl* stream, uint64_t token) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_.load(std::memory_order_relaxed)) return true;
  parked_.emplace_back(stream, token);
  return false;
}

void Completion::complete(int64_t timestamp_ns) {
  std::vector<std::pair<RuntimeStream::Impl*, uint64_t>> parked;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return;
    timestamp_ns_ = timestamp_ns;
    done_.store(true, std::memory_order_release);
    parked.swap(parked_);
    done_cv_.notify_all();
  }
  for (const auto& [stream, token] : parked) stream->context->scheduler.resume(stream, token);
}

void Completion::hostWait() const {
  // Spin briefly first (spin_wait.hpp), then sleep.
  if (spinUntil([this] { return isComplete(); }, kHostSpinBudget)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return done_.load(std::memory_order_relaxed); });
}

size_t Completion::parkedStreams() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return parked_.size();
}

}  // namespace flex::detail
