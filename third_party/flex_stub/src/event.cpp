// Events: each record() creates a fresh completion state that the queued record
// operation completes. Waits and host synchronization hold on to the state they
// saw, so a later re-record never redirects (or releases) an earlier wait.
#include <mutex>

#include "context_impl.hpp"
#include "lifecycle.hpp"
#include "stream_impl.hpp"

namespace flex {

using detail::Completion;
using detail::Op;
using detail::OpKind;

struct RuntimeEvent::State {
  State(bool timing, bool blocking_sync) : enable_timing(timing), blocking(blocking_sync) {}

  std::shared_ptr<Completion> latest() const {
    std::lock_guard<std::mutex> lock(mutex);
    return last_record;
  }

  const bool enable_timing;
  // Kept for API fidelity: every host wait sleeps, blocking or not.
  const bool blocking;
  mutable std::mutex mutex;
  std::shared_ptr<Completion> last_record;  // null until the first record()
};

namespace {

RuntimeStream::Impl& streamArg(RuntimeStream* stream, const char* what) {
  if (!stream) throw Error(std::string("flex: RuntimeEvent::") + what + ": stream is null");
  return *stream->impl();
}

}  // namespace

RuntimeEvent::RuntimeEvent(bool enable_timing, bool blocking)
    : state_(std::make_shared<State>(enable_timing, blocking)) {}

// Queued operations own their completion states, so nothing waits on `state_`.
RuntimeEvent::~RuntimeEvent() = default;

void RuntimeEvent::record(RuntimeStream* stream) {
  RuntimeStream::Impl& target = streamArg(stream, "record");
  auto record = std::make_shared<Completion>();
  Op op;
  op.kind = OpKind::EventRecord;
  op.sync = record;
  target.enqueue(std::move(op));
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->last_record = std::move(record);
}

void RuntimeEvent::wait(RuntimeStream* stream) {
  RuntimeStream::Impl& target = streamArg(stream, "wait");
  std::shared_ptr<Completion> record = state_->latest();
  if (!record) {
    detail::checkNotForkedChild();
    return;  // never recorded: already complete
  }
  Op op;
  op.kind = OpKind::EventWait;
  op.sync = std::move(record);
  target.enqueue(std::move(op));
}

bool RuntimeEvent::query() const {
  detail::checkNotForkedChild();
  std::shared_ptr<Completion> record = state_->latest();
  return !record || record->isComplete();
}

void RuntimeEvent::synchronize() const {
  detail::checkNotForkedChild();
  std::shared_ptr<Completion> record = state_->latest();
  if (!record) return;
  // The host resumes, in modeled time, when the record is reached.
  if (record->modeledNs() >= 0) {
    if (const RuntimeContext* context = RuntimeContext::get()) {
      if (const auto& clock = context->impl()->card_clock) clock->hostWaitUntil(record->modeledNs());
    }
  }
  record->hostWait();
}

double RuntimeEvent::elapsedTime(const RuntimeEvent& end) const {
  if (!timingEnabled() || !end.timingEnabled()) {
    throw Error(std::string("flex: elapsedTime needs two timing-enabled events (start: ") +
                (timingEnabled() ? "timing" : "no timing") + ", end: " +
                (end.timingEnabled() ? "timing" : "no timing") + ")");
  }
  const std::shared_ptr<Completion> first = state_->latest();
  const std::shared_ptr<Completion> last = end.state_->latest();
  if (!first || !last) {
    throw Error(std::string("flex: elapsedTime needs two recorded events (start: ") +
                (first ? "recorded" : "never recorded") + ", end: " +
                (last ? "recorded" : "never recorded") + ")");
  }
  if (!first->isComplete() || !last->isComplete()) {
    throw Error(std::string("flex: elapsedTime needs two completed events (start: ") +
                (first->isComplete() ? "complete" : "not complete") + ", end: " +
                (last->isComplete() ? "complete" : "not complete") + ")");
  }
  if (first->modeledNs() >= 0 && last->modeledNs() >= 0) {  // FLEX_STUB_TIMING=card
    return static_cast<double>(last->modeledNs() - first->modeledNs()) / 1e6;
  }
  return static_cast<double>(last->timestampNs() - first->timestampNs()) / 1e6;
}

bool RuntimeEvent::timingEnabled() const { return state_->enable_timing; }
bool RuntimeEvent::recorded() const { return state_->latest() != nullptr; }

}  // namespace flex
