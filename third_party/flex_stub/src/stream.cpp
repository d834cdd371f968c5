// Stream state: queueing, completion counting, synchronization and error latching.
//
// launched/completed are written under the stream mutex and read lock-free:
// query() and an idle synchronize() are a few atomic loads. Operations finish
// in launch order, so completed >= n means the first n launched have finished.
#include <algorithm>

#include "flex/testing.hpp"

#include "clock.hpp"
#include "context_impl.hpp"
#include "lifecycle.hpp"
#include "spin_wait.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex {

using detail::Op;
using detail::OpKind;

RuntimeStream::Impl::Impl(RuntimeContext::Impl* context_impl, uint64_t stream_id,
                          RuntimeStreamPriority stream_priority)
    : context(context_impl), id(stream_id), priority(stream_priority) {}

void RuntimeStream::Impl::enqueue(Op&& op) { enqueue(&op, 1); }

void RuntimeStream::Impl::enqueue(Op* ops, size_t count) {
  const int64_t launch_start_ns = detail::trace::enabled() ? detail::nowNs() : 0;
  detail::checkNotForkedChild();
  std::unique_lock<std::mutex> lock(mutex);
  if (detail::g_shut_down.load(std::memory_order_relaxed)) detail::throwShutDown();
  if (failed.load(std::memory_order_relaxed)) {
    throw Error("Cannot schedule operation on stream in error state: " + error_message);
  }
  for (size_t i = 0; i < count; ++i) {
    if (launch_start_ns != 0) detail::trace::stampLaunch(ops[i], launch_start_ns);
    if (context->card_clock) context->card_clock->schedule(id, ops[i]);
    queue.push_back(std::move(ops[i]));
  }
  launched.store(launched.load(std::memory_order_relaxed) + count, std::memory_order_release);
  if (state != State::Idle) return;  // an engine or the ready queue already has it
  state = State::Ready;
  lock.unlock();
  context->scheduler.makeReady(this);
}

bool RuntimeStream::Impl::completeLocked(uint64_t count) {
  const uint64_t done = completed.load(std::memory_order_relaxed) + count;
  completed.store(done, std::memory_order_release);
  // Wake waiters only when the nearest target is reached: a synchronize() after
  // a long pipeline sleeps through the pipeline instead of waking per operation.
  if (done < wake_target) return false;
  wake_target = UINT64_MAX;  // each woken waiter that is not done re-registers
  done_cv.notify_all();
  return true;
}

void RuntimeStream::Impl::failLocked(std::unique_lock<std::mutex>& lock, std::string message,
                                     Op failed_op) {
  // Discarded operations are destroyed after unlocking: their callables may own
  // objects whose destructors call back into the runtime.
  std::vector<Op> discarded;
  discarded.reserve(queue.size() + 1);
  discarded.push_back(std::move(failed_op));
  while (!queue.empty()) discarded.push_back(queue.pop_front());

  error_message = std::move(message);
  error_unreported.store(true, std::memory_order_release);
  failed.store(true, std::memory_order_release);
  context->failed_streams.fetch_add(1, std::memory_order_relaxed);
  state = State::Idle;
  // After the flags: a caller that sees the completion also sees the error.
  completeLocked(discarded.size());
  lock.unlock();

  const int64_t now = detail::nowNs();
  for (Op& op : discarded) {
    if (op.kind == OpKind::EventRecord) op.sync->complete(now);
    // (An operation that ran and failed comes here empty: only unrun ones are released.)
    if (op.on_discard != nullptr) op.on_discard(op.discard_arg);
  }
}

void RuntimeStream::Impl::abandon() {
  std::vector<Op> discarded;
  {
    std::lock_guard<std::mutex> lock(mutex);
    while (!queue.empty()) discarded.push_back(queue.pop_front());
    // A parked stream is unparked too: its pending resume finds it Idle and stops.
    state = State::Idle;
    completeLocked(discarded.size());
    done_cv.notify_all();  // waiters also stop on g_shut_down
  }
  const int64_t now = detail::nowNs();
  for (Op& op : discarded) {
    if (op.kind == OpKind::EventRecord) op.sync->complete(now);
    if (op.on_discard != nullptr) op.on_discard(op.discard_arg);
  }
}

void RuntimeStream::Impl::waitForCompleted(uint64_t target) {
  std::unique_lock<std::mutex> lock(mutex);
  while (completed.load(std::memory_order_relaxed) < target &&
         !detail::g_shut_down.load(std::memory_order_relaxed)) {
    wake_target = std::min(wake_target, target);
    done_cv.wait(lock);
  }
}

void RuntimeStream::Impl::throwPendingError() {
  std::unique_lock<std::mutex> lock(mutex);
  if (!error_unreported.load(std::memory_order_relaxed)) return;
  error_unreported.store(false, std::memory_order_relaxed);
  std::string message = error_message;
  lock.unlock();
  throw Error(message);
}

RuntimeStream::RuntimeStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RuntimeStream::~RuntimeStream() = default;

bool RuntimeStream::query() {
  detail::checkNotForkedChild();
  const uint64_t launched = impl_->launched.load(std::memory_order_acquire);
  const bool idle = impl_->completed.load(std::memory_order_acquire) >= launched;
  if (impl_->error_unreported.load(std::memory_order_acquire)) impl_->throwPendingError();
  return idle;
}

void RuntimeStream::synchronize() {
  detail::checkNotForkedChild();
  const uint64_t target = impl_->launched.load(std::memory_order_acquire);
  // The host resumes, in modeled time, when what it waits for ends.
  if (impl_->context->card_clock) impl_->context->card_clock->hostWaitStream(impl_->id);
  // Spin briefly first (spin_wait.hpp): a short op completes within it.
  const auto reached = [&] {
    return impl_->completed.load(std::memory_order_acquire) >= target ||
           detail::g_shut_down.load(std::memory_order_relaxed);
  };
  if (!detail::spinUntil(reached, detail::kHostSpinBudget)) impl_->waitForCompleted(target);
  if (impl_->error_unreported.load(std::memory_order_acquire)) impl_->throwPendingError();
}

bool RuntimeStream::needsShutdown() const { return impl_->failed.load(std::memory_order_acquire); }

std::string RuntimeStream::errorMessage() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->error_message;
}

RuntimeStreamPriority RuntimeStream::priority() const { return impl_->priority; }
uint64_t RuntimeStream::streamId() const { return impl_->id; }

namespace test {

uint64_t launchedOps(const RuntimeStream* stream) {
  return stream->impl()->launched.load(std::memory_order_acquire);
}

uint64_t completedOps(const RuntimeStream* stream) {
  return stream->impl()->completed.load(std::memory_order_acquire);
}

}  // namespace test
}  // namespace flex
