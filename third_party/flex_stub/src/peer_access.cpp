// Peer access windows (flex.hpp): two operations queued together, an event
// record that tells the host the stream has reached the window, and a gate
// that holds the stream until the peer closes the window.
#include <atomic>
#include <string>

#include "clock.hpp"
#include "completion.hpp"
#include "lifecycle.hpp"
#include "op.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex {

struct PeerAccessWindow::State {
  // Completed when the stream reaches the window, or when the operation is
  // dropped (its stream failed before it, or shutdown): stream.cpp completes
  // the event records it discards.
  std::shared_ptr<detail::Completion> reached = std::make_shared<detail::Completion>();
  // The gate the stream parks on until close().
  std::shared_ptr<detail::Completion> closed = std::make_shared<detail::Completion>();
  // Set once by enqueueOn, read by the peer's threads (waitOpen, isOpen);
  // streams live until exit.
  std::atomic<RuntimeStream::Impl*> stream{nullptr};
};

PeerAccessWindow::PeerAccessWindow() : state_(std::make_shared<State>()) {}

PeerAccessWindow::~PeerAccessWindow() { close(); }

void PeerAccessWindow::enqueueOn(RuntimeStream* stream, const std::string& name) {
  if (!stream) throw Error("flex: PeerAccessWindow::enqueueOn: stream is null");
  // Claimed before the enqueue, so two callers cannot both queue it.
  RuntimeStream::Impl* expected = nullptr;
  if (!state_->stream.compare_exchange_strong(expected, stream->impl(),
                                              std::memory_order_acq_rel)) {
    throw Error("flex: PeerAccessWindow::enqueueOn: the window '" + name +
                "' is already queued (a window opens once)");
  }
  detail::Op ops[2];
  ops[0].kind = detail::OpKind::EventRecord;
  ops[0].sync = state_->reached;
  ops[1].kind = detail::OpKind::Gate;
  ops[1].sync = state_->closed;
  if (detail::trace::enabled()) ops[1].name = "peer_access:" + name;
  try {
    stream->impl()->enqueue(ops, 2);
  } catch (...) {
    state_->stream.store(nullptr, std::memory_order_release);  // not queued
    throw;
  }
}

void PeerAccessWindow::closeWhenReached(RuntimeStream* other) {
  if (!other) throw Error("flex: PeerAccessWindow::closeWhenReached: stream is null");
  // A record completes its state when its stream reaches it, and also when
  // the stream discards it (stream.cpp): the gate cannot stay shut.
  detail::Op op;
  op.kind = detail::OpKind::EventRecord;
  op.sync = state_->closed;
  other->impl()->enqueue(std::move(op));
}

bool PeerAccessWindow::waitOpen() const {
  RuntimeStream::Impl* stream = state_->stream.load(std::memory_order_acquire);
  if (!stream) return false;  // never queued: it cannot open
  state_->reached->hostWait();
  // A dropped record completes after the stream's failure is latched
  // (stream.cpp), so a failure before the window is always seen here.
  return !stream->failed.load(std::memory_order_acquire) &&
         !detail::g_shut_down.load(std::memory_order_acquire);
}

bool PeerAccessWindow::isOpen() const {
  RuntimeStream::Impl* stream = state_->stream.load(std::memory_order_acquire);
  return stream && state_->reached->isComplete() && !state_->closed->isComplete() &&
         !stream->failed.load(std::memory_order_acquire);
}

void PeerAccessWindow::close() { state_->closed->complete(detail::nowNs()); }

}  // namespace flex
