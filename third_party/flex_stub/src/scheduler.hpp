// The device-wide scheduler: engine threads take ready streams and run their
// operations one at a time (scheduler.cpp; docs/flex_stub.md, "Engines").
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "clock.hpp"
#include "dma.hpp"
#include "flex/flex.hpp"
#include "op.hpp"
#include "chunked_queue.hpp"
#include "thread_cpus.hpp"

namespace flex::detail {

struct SchedulerConfig {
  size_t max_engines = SIZE_MAX;   // FLEX_STUB_ENGINES
  double dma_bytes_per_ns = 0;     // FLEX_STUB_DMA_GBPS (1 GB/s == 1 byte/ns); 0: memcpy speed
  size_t dma_engines = 1;          // FLEX_STUB_DMA_ENGINES: threads sharing one large copy
  int64_t fault_after = -1;        // FLEX_STUB_FAULT_AFTER; -1: off
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues `stream` (state already set to Ready) and wakes an idle engine, or
  // starts one if none is idle and the cap allows.
  void makeReady(RuntimeStream::Impl* stream);
  // Continuation of a completion: the stream parked at operation `token` may go on.
  void resume(RuntimeStream::Impl* stream, uint64_t token);

  // Sleeps until `deadline`; stop() cuts the sleep short.
  void sleepUntil(Clock::time_point deadline);
  const SchedulerConfig& config() const { return config_; }
  DmaEngines& dma() { return dma_; }

  // Shutdown: running operations finish, engines exit and are joined, then
  // the DMA workers. Queued work stays queued (the caller abandons it).
  void stop();

 private:
  struct Engine {
    std::thread thread;
    std::condition_variable wake_cv;
    // Set under mutex_ by the claimer; read lock-free while the engine lingers.
    std::atomic<bool> woken{false};
    bool lingering = false;  // guarded by mutex_: the claimer need not notify
  };

  void engineMain(Engine* self);
  // An idle engine that has just run work polls for a claim for up to
  // kEngineLingerBudget (spin_wait.hpp) before it sleeps, so a launch right
  // after the previous op's completion is picked up without a cross-core
  // wake. Called with mutex_ held and `self` in idle_; returns with it held.
  void linger(Engine* self, std::unique_lock<std::mutex>& lock);
  // Runs operations of `stream` until it empties, parks, fails, or has to yield
  // to another ready stream. Returns true when it must be requeued.
  bool runStream(RuntimeStream::Impl* stream);
  // Called with `stream` locked and its queue empty after a backlog, when the
  // host looks like it is launching in a loop. The engine keeps the stream
  // (still Running) for up to kLingerTime, yielding its core, in case more
  // launches follow: the host then finds the stream running and skips waking
  // an engine, a futex call that would cost it microseconds each time the
  // engine catches up. Cut short when another stream waits for an engine.
  // Returns true when work arrived.
  bool awaitMoreWork(RuntimeStream::Impl* stream, std::unique_lock<std::mutex>& lock);
  static constexpr std::chrono::nanoseconds kLingerTime{3000};
  // Executes one operation outside any lock; the op is destroyed before return.
  bool runOp(RuntimeStream::Impl* stream, Op op, std::string& error);
  // A graph launch: its nodes in order, each traced as its own operation.
  bool runGraph(RuntimeStream::Impl* stream, const Op& launch, std::string& error);
  // Consumes a pending fault for the operation about to run, if any.
  bool takeFault(RuntimeStream::Impl* stream, std::string& message);
  bool shouldYield(RuntimeStreamPriority running) const;
  void pushReadyLocked(RuntimeStream::Impl* stream);
  RuntimeStream::Impl* popReadyLocked();
  void startEngineLocked();

  const SchedulerConfig config_;
  const ThreadCpus cpus_;  // the creating thread's: every engine starts with them
  DmaEngines dma_;
  std::atomic<int64_t> executed_ops_{0};  // for FLEX_STUB_FAULT_AFTER
  std::atomic<bool> stopping_{false};

  mutable std::mutex mutex_;
  ChunkedQueue<RuntimeStream::Impl*> ready_[2];  // index: kHigh, kNormal
  std::atomic<int> ready_count_[2] = {};  // mirrors ready_ sizes for lock-free yield checks
  std::vector<Engine*> idle_;             // LIFO: the most recently busy engine is cache-warm
  std::vector<std::unique_ptr<Engine>> engines_;

  std::mutex sleep_mutex_;
  std::condition_variable sleep_cv_;
};

}  // namespace flex::detail
