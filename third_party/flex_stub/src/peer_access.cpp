// Peer access windows (flex.hpp): two operations queued together, an event
// record that tells the host the stream has reached the window, and a gate
// that holds the stream until the peer closes the window.
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
  RuntimeStream::Impl* stream = nullptr;  // set once by enqueueOn; streams live until exit
};

PeerAccessWindow::PeerAccessWindow() : state_(std::make_shared<State>()) {}

PeerAccessWindow::~PeerAccessWindow() { close(); }

void PeerAccessWindow::enqueueOn(RuntimeStream* stream, const std::string& name) {
  if (!stream) throw Error("flex: PeerAccessWindow::enqueueOn: stream is null");
  if (state_->stream) {
    throw Error("flex: PeerAccessWindow::enqueueOn: the window '" + name +
                "' is already queued (a window opens once)");
  }
  detail::Op ops[2];
  ops[0].kind = detail::OpKind::EventRecord;
  ops[0].sync = state_->reached;
  ops[1].kind = detail::OpKind::Gate;
  ops[1].sync = state_->closed;
  if (detail::trace::enabled()) ops[1].name = "peer_access:" + name;
  stream->impl()->enqueue(ops, 2);
  state_->stream = stream->impl();
}

bool PeerAccessWindow::waitOpen() const {
  if (!state_->stream) return false;  // never queued: it cannot open
  state_->reached->hostWait();
  // A dropped record completes after the stream's failure is latched
  // (stream.cpp), so a failure before the window is always seen here.
  return !state_->stream->failed.load(std::memory_order_acquire) &&
         !detail::g_shut_down.load(std::memory_order_acquire);
}

bool PeerAccessWindow::isOpen() const {
  return state_->stream && state_->reached->isComplete() && !state_->closed->isComplete() &&
         !state_->stream->failed.load(std::memory_order_acquire);
}

void PeerAccessWindow::close() { state_->closed->complete(detail::nowNs()); }

}  // namespace flex
