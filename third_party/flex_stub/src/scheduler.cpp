// Engines and the ready queues.
//
// An engine takes the first ready stream (HIGH before NORMAL, FIFO within a
// priority, which makes equal-priority streams take turns), runs its front
// operation, and keeps going on the same stream only while no stream of equal
// or higher priority is waiting for an engine; otherwise it requeues the
// stream behind the others. A stream whose front operation waits on an
// incomplete event record or gate parks on it and gives its engine back.
// Engines start lazily when a stream becomes ready and none is idle.
#include "scheduler.hpp"

#include <utility>

#include "context_impl.hpp"
#include "operations.hpp"
#include "spin_wait.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex::detail {
namespace {

using State = RuntimeStream::Impl::State;

int priorityIndex(RuntimeStreamPriority priority) {
  return priority == RuntimeStreamPriority::HIGH ? 0 : 1;
}

bool isWait(OpKind kind) { return kind == OpKind::EventWait || kind == OpKind::Gate; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config), cpus_(ThreadCpus::ofCallingThread()), dma_(config.dma_engines, cpus_) {}

void Scheduler::pushReadyLocked(RuntimeStream::Impl* stream) {
  const int index = priorityIndex(stream->priority);
  ready_[index].push_back(std::move(stream));
  ready_count_[index].fetch_add(1, std::memory_order_relaxed);
}

RuntimeStream::Impl* Scheduler::popReadyLocked() {
  for (int index = 0; index < 2; ++index) {
    if (!ready_[index].empty()) {
      ready_count_[index].fetch_sub(1, std::memory_order_relaxed);
      return ready_[index].pop_front();
    }
  }
  return nullptr;
}

bool Scheduler::shouldYield(RuntimeStreamPriority running) const {
  if (ready_count_[0].load(std::memory_order_relaxed) > 0) return true;
  return running == RuntimeStreamPriority::NORMAL &&
         ready_count_[1].load(std::memory_order_relaxed) > 0;
}

void Scheduler::startEngineLocked() {
  auto engine = std::make_unique<Engine>();
  try {
    engine->thread = std::thread(&Scheduler::engineMain, this, engine.get());
  } catch (const std::system_error& e) {
    // With engines running, the stream is served when one frees up.
    if (!engines_.empty()) return;
    throw Error(std::string("flex: cannot start an engine thread: ") + e.what());
  }
  engines_.push_back(std::move(engine));
}

void Scheduler::makeReady(RuntimeStream::Impl* stream) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (stopping_.load(std::memory_order_relaxed)) return;  // shutdown abandons it
  pushReadyLocked(stream);
  if (!idle_.empty()) {
    // Claim the engine now so a second makeReady() wakes a different one.
    Engine* engine = idle_.back();
    idle_.pop_back();
    engine->woken.store(true, std::memory_order_release);
    const bool sleeping = !engine->lingering;  // a lingering engine sees the flag itself
    lock.unlock();
    if (sleeping) engine->wake_cv.notify_one();
    return;
  }
  if (engines_.size() < config_.max_engines) startEngineLocked();
}

void Scheduler::resume(RuntimeStream::Impl* stream, uint64_t token) {
  std::unique_lock<std::mutex> lock(stream->mutex);
  // Shutdown may have abandoned the wait already.
  if (stream->state != State::Parked ||
      stream->completed.load(std::memory_order_relaxed) != token) {
    return;
  }
  Op wait = stream->queue.pop_front();
  if (trace::enabled()) trace::record(*stream, wait, stream->parked_since_ns, nowNs());
  stream->completeLocked(1);
  if (stream->queue.empty()) {
    stream->state = State::Idle;
    return;
  }
  stream->state = State::Ready;
  lock.unlock();
  makeReady(stream);
}

void Scheduler::linger(Engine* self, std::unique_lock<std::mutex>& lock) {
  self->lingering = true;
  lock.unlock();
  spinUntil(
      [&] {
        return self->woken.load(std::memory_order_acquire) ||
               stopping_.load(std::memory_order_relaxed);
      },
      kEngineLingerBudget);
  lock.lock();
  self->lingering = false;  // from here a claimer notifies
}

void Scheduler::engineMain(Engine* self) {
  cpus_.applyToCallingThread();
  std::unique_lock<std::mutex> lock(mutex_);
  RuntimeStream::Impl* requeue = nullptr;
  bool ran_work = false;
  for (;;) {
    if (requeue) pushReadyLocked(std::exchange(requeue, nullptr));
    if (stopping_.load(std::memory_order_relaxed)) return;
    RuntimeStream::Impl* stream = popReadyLocked();
    if (!stream) {
      idle_.push_back(self);
      if (std::exchange(ran_work, false)) linger(self, lock);
      self->wake_cv.wait(lock, [&] {
        return self->woken.load(std::memory_order_relaxed) ||
               stopping_.load(std::memory_order_relaxed);
      });
      self->woken.store(false, std::memory_order_relaxed);
      continue;
    }
    lock.unlock();
    if (runStream(stream)) requeue = stream;
    ran_work = true;
    lock.lock();
  }
}

bool Scheduler::takeFault(RuntimeStream::Impl* stream, std::string& message) {
  const bool counted_fault =
      config_.fault_after >= 0 &&
      executed_ops_.fetch_add(1, std::memory_order_relaxed) == config_.fault_after;
  if (stream->fault_pending) {
    stream->fault_pending = false;
    message = std::move(stream->injected_fault);
    return true;
  }
  if (counted_fault) {
    message = "flex: injected fault (FLEX_STUB_FAULT_AFTER=" +
              std::to_string(config_.fault_after) + ")";
    return true;
  }
  return false;
}

bool Scheduler::runOp(RuntimeStream::Impl* stream, Op op, std::string& error) {
  if (op.kind == OpKind::Graph) return runGraph(stream, op, error);
  const bool tracing = trace::enabled();
  const int64_t start = tracing ? nowNs() : 0;
  const bool ok = executeOp(op, *this, error);
  if (tracing) trace::record(*stream, op, start, nowNs(), /*failed=*/!ok);
  return ok;
}

bool Scheduler::runGraph(RuntimeStream::Impl* stream, const Op& launch, std::string& error) {
  const int64_t graph_start = trace::enabled() ? nowNs() : 0;
  bool ok = true;
  size_t index = 0;
  for (const Op& node : launch.graph->ops) {
    const bool tracing = trace::enabled();
    const int64_t start = tracing ? nowNs() : 0;
    // Nodes are shared by every launch of the graph: executeOp leaves them as
    // they are; a traced node's record carries the launch's correlation ids.
    ok = executeOp(node, *this, error);
    if (tracing) {
      Op traced;
      traced.kind = node.kind;
      traced.bytes = node.bytes;
      traced.name = node.name;
      traced.launch = launch.launch;
      traced.launch.id = 0;  // each node's record gets its own id
      traced.launch.graph_launch = launch.launch.id;
      if (index < launch.card_nodes.size()) {
        traced.card_start = launch.card_nodes[index].first;
        traced.card_end = launch.card_nodes[index].second;
      }
      trace::record(*stream, traced, start, nowNs(), /*failed=*/!ok);
    }
    if (!ok) {
      error = "graph node " + std::to_string(index) + " (" +
              (node.name.empty() ? opKindName(node.kind) : node.name) + "): " + error;
      break;
    }
    ++index;
  }
  if (graph_start != 0) trace::record(*stream, launch, graph_start, nowNs(), /*failed=*/!ok);
  return ok;
}

bool Scheduler::awaitMoreWork(RuntimeStream::Impl* stream, std::unique_lock<std::mutex>& lock) {
  const uint64_t launched = stream->launched.load(std::memory_order_relaxed);
  lock.unlock();
  const Clock::time_point deadline = Clock::now() + kLingerTime;
  while (stream->launched.load(std::memory_order_relaxed) == launched &&
         ready_count_[0].load(std::memory_order_relaxed) == 0 &&
         ready_count_[1].load(std::memory_order_relaxed) == 0 &&
         !stopping_.load(std::memory_order_relaxed) && Clock::now() < deadline) {
    std::this_thread::yield();  // lets a runnable host thread have this core
  }
  lock.lock();
  return !stream->queue.empty();
}

bool Scheduler::runStream(RuntimeStream::Impl* stream) {
  std::unique_lock<std::mutex> lock(stream->mutex);
  // The host looks like it is launching in a loop when operations were queued
  // behind the one taken and no synchronize() caller was just woken.
  bool backlog = false;
  bool woke_waiter = false;
  for (;;) {
    const bool drained =
        stream->queue.empty() && !(backlog && !woke_waiter && awaitMoreWork(stream, lock));
    if (drained || stopping_.load(std::memory_order_relaxed)) {
      stream->state = State::Idle;  // on shutdown the queue is abandoned afterwards
      return false;
    }
    std::string message;
    if ((stream->fault_pending || config_.fault_after >= 0) && takeFault(stream, message)) {
      Op faulted = stream->queue.pop_front();
      if (trace::enabled()) {
        const int64_t now = nowNs();
        trace::record(*stream, faulted, now, now, /*failed=*/true);
      }
      stream->failLocked(lock, std::move(message), std::move(faulted));
      return false;
    }
    Op& front = stream->queue.front();
    if (isWait(front.kind)) {
      // Checked and parked under the stream lock, so the resume cannot run
      // before the stream is marked Parked.
      const uint64_t token = stream->completed.load(std::memory_order_relaxed);
      if (!front.sync->passOrPark(stream, token)) {
        stream->state = State::Parked;
        stream->parked_since_ns = nowNs();  // tracing may start while parked
        return false;
      }
      const Op wait = stream->queue.pop_front();
      if (trace::enabled()) {
        const int64_t now = nowNs();  // one reading: argument order is unspecified
        trace::record(*stream, wait, now, now);
      }
      woke_waiter = stream->completeLocked(1);
    } else {
      stream->state = State::Running;
      Op op = stream->queue.pop_front();
      backlog = backlog || !stream->queue.empty();
      lock.unlock();
      const bool ok = runOp(stream, std::move(op), message);
      lock.lock();
      if (!ok) {
        stream->failLocked(lock, std::move(message), Op{});
        return false;
      }
      woke_waiter = stream->completeLocked(1);
    }
    if (!stream->queue.empty() && shouldYield(stream->priority)) {
      stream->state = State::Ready;
      return true;
    }
  }
}

void Scheduler::sleepUntil(Clock::time_point deadline) {
  // A deadline already reached (a zero delay, DMA that ran slower than its
  // rate) returns at once: a timed wait that has expired still costs the
  // kernel's timer slack, tens of microseconds.
  if (Clock::now() >= deadline) return;
  std::unique_lock<std::mutex> lock(sleep_mutex_);
  sleep_cv_.wait_until(lock, deadline,
                       [this] { return stopping_.load(std::memory_order_relaxed); });
}

void Scheduler::stop() {
  std::vector<std::thread*> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true, std::memory_order_relaxed);
    for (auto& engine : engines_) {
      engine->wake_cv.notify_one();
      threads.push_back(&engine->thread);
    }
  }
  {
    // Taken once so a sleeper that just checked `stopping_` is waiting before the notify.
    std::lock_guard<std::mutex> lock(sleep_mutex_);
  }
  sleep_cv_.notify_all();
  for (std::thread* thread : threads) {
    // exit() called from an operation runs this on an engine: it cannot join itself.
    if (thread->get_id() == std::this_thread::get_id()) {
      thread->detach();
    } else {
      thread->join();
    }
  }
  dma_.stop();  // after the engines: a running copy may still use the workers
}

}  // namespace flex::detail
