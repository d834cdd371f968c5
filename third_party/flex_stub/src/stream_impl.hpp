// The state of one stream (stream.cpp), driven by the scheduler.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "flex/flex.hpp"
#include "op.hpp"
#include "chunked_queue.hpp"

namespace flex {

struct RuntimeStream::Impl {
  // Idle: nothing to run. Ready: in the scheduler's ready queue. Running: on an
  // engine. Parked: its front operation waits on a completion (no engine held).
  enum class State : uint8_t { Idle, Ready, Running, Parked };

  Impl(RuntimeContext::Impl* context, uint64_t id, RuntimeStreamPriority priority);

  // Queues `op` and readies the stream if it was idle. Throws when the stream
  // has failed, the runtime is shut down, or this is a forked child.
  void enqueue(detail::Op&& op);
  // The same for `count` operations queued together: no other launch falls
  // between them.
  void enqueue(detail::Op* ops, size_t count);

  // Counts `count` front operations as done and wakes synchronize() callers
  // whose target is reached; returns true if it woke any.
  bool completeLocked(uint64_t count);
  // Latches `message`: the failed operation and every queued one count as done;
  // queued event records still complete so other streams' waits release.
  // Unlocks `lock`.
  void failLocked(std::unique_lock<std::mutex>& lock, std::string message, detail::Op failed_op);
  // Shutdown: drops the queue (counted done), completes queued event records.
  void abandon();

  void waitForCompleted(uint64_t target);
  // Throws the latched failure if it has not been reported yet.
  void throwPendingError();

  RuntimeContext::Impl* const context;
  const uint64_t id;
  const RuntimeStreamPriority priority;

  std::mutex mutex;
  detail::ChunkedQueue<detail::Op> queue;  // guarded by mutex
  State state = State::Idle;       // guarded by mutex
  std::atomic<uint64_t> launched{0};   // written under mutex, read lock-free
  std::atomic<uint64_t> completed{0};  // written under mutex, read lock-free

  std::condition_variable done_cv;
  uint64_t wake_target = UINT64_MAX;  // smallest target a waiter sleeps for; guarded by mutex

  std::atomic<bool> failed{false};
  std::atomic<bool> error_unreported{false};
  std::string error_message;   // guarded by mutex; set once
  std::string injected_fault;  // guarded by mutex
  bool fault_pending = false;  // guarded by mutex

  int64_t parked_since_ns = 0;  // trace start of the wait the stream is parked on
};

}  // namespace flex
