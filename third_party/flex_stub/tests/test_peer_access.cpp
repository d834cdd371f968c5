// flex::PeerAccessWindow: a peer's access to device memory as a stream operation.
#include <atomic>
#include <memory>
#include <thread>

#include "util.hpp"

using flex::PeerAccessWindow;
using flex::RuntimeStream;
using flex::test::Gate;

TEST(peer_window_opens_in_stream_order_and_holds_the_stream_until_closed) {
  RuntimeStream* stream = util::context()->createStream();
  Gate before;
  std::atomic<int> ran{0};
  before.enqueueOn(stream);
  PeerAccessWindow window;
  window.enqueueOn(stream, "allreduce");
  util::callback(stream, [&ran] { ++ran; });
  WAIT_UNTIL(before.blockedStreams() == 1);
  CHECK(!window.isOpen());  // the stream has not reached it
  before.release();
  CHECK(window.waitOpen());
  CHECK(window.isOpen());
  CHECK(!stream->query());  // held at the window
  CHECK_EQ(ran.load(), 0);
  window.close();
  stream->synchronize();
  CHECK_EQ(ran.load(), 1);
  CHECK(!window.isOpen());
  window.close();  // twice: harmless
}

TEST(peer_window_closed_before_it_is_reached_passes_at_once) {
  RuntimeStream* stream = util::context()->createStream();
  PeerAccessWindow window;
  window.enqueueOn(stream, "broadcast");
  window.close();
  stream->synchronize();
  CHECK(window.waitOpen());  // it was reached (and passed)
  CHECK(!window.isOpen());
}

TEST(peer_window_destroyed_unclosed_releases_its_stream) {
  RuntimeStream* stream = util::context()->createStream();
  auto window = std::make_unique<PeerAccessWindow>();
  window->enqueueOn(stream, "reduce");
  CHECK(window->waitOpen());
  window.reset();
  stream->synchronize();
  CHECK(stream->query());
}

TEST(peer_window_never_opens_on_a_stream_that_failed_before_it) {
  RuntimeStream* stream = util::context()->createStream();
  Gate before;
  before.enqueueOn(stream);
  WAIT_UNTIL(before.blockedStreams() == 1);
  flex::test::injectFault(stream, "injected: link down");
  util::callback(stream, [] {});  // the fault hits this one, after the gate
  PeerAccessWindow window;
  window.enqueueOn(stream, "allgather");
  before.release();
  CHECK(!window.waitOpen());
  CHECK(!window.isOpen());
  CHECK_EQ(stream->errorMessage(), std::string("injected: link down"));
  CHECK_THROWS_MSG(stream->synchronize(), "injected: link down");
}

TEST(peer_window_refuses_a_failed_stream_a_null_stream_and_a_second_enqueue) {
  RuntimeStream* stream = util::context()->createStream();
  PeerAccessWindow unqueued;
  CHECK(!unqueued.waitOpen());  // never queued: never opens, does not block
  CHECK_THROWS_MSG(unqueued.enqueueOn(nullptr, "x"), "stream is null");
  PeerAccessWindow window;
  window.enqueueOn(stream, "allreduce");
  CHECK_THROWS_MSG(window.enqueueOn(stream, "allreduce"),
                   "the window 'allreduce' is already queued");
  window.close();
  stream->synchronize();
  flex::test::injectFault(stream, "injected: gone");
  util::callback(stream, [] {});
  CHECK_THROWS_MSG(stream->synchronize(), "injected: gone");
  PeerAccessWindow late;
  CHECK_THROWS_MSG(late.enqueueOn(stream, "allreduce"), "stream in error state");
  CHECK(!late.waitOpen());  // the refused enqueue left it unqueued
  CHECK_THROWS_MSG(late.closeWhenReached(stream), "stream in error state");
  CHECK_THROWS_MSG(late.closeWhenReached(nullptr), "stream is null");
}

TEST(peer_window_closes_when_another_stream_reaches_the_point_queued_there) {
  RuntimeStream* held = util::context()->createStream();
  RuntimeStream* other = util::context()->createStream();
  PeerAccessWindow window;
  window.enqueueOn(held, "allreduce");
  CHECK(window.waitOpen());
  Gate before;  // the work queued on `other` ahead of the close (the copies back)
  before.enqueueOn(other);
  std::atomic<int> ran{0};
  util::callback(other, [&ran] { ++ran; });
  window.closeWhenReached(other);
  WAIT_UNTIL(before.blockedStreams() == 1);
  CHECK(window.isOpen());  // `other` has not reached the close
  CHECK(!held->query());
  before.release();
  held->synchronize();  // returns only once `other` ran what was queued before the close
  CHECK_EQ(ran.load(), 1);
  CHECK(!window.isOpen());
}

TEST(peer_window_closes_when_the_stream_that_was_to_close_it_fails) {
  RuntimeStream* held = util::context()->createStream();
  RuntimeStream* other = util::context()->createStream();
  PeerAccessWindow window;
  window.enqueueOn(held, "broadcast");
  CHECK(window.waitOpen());
  Gate before;
  before.enqueueOn(other);
  WAIT_UNTIL(before.blockedStreams() == 1);
  flex::test::injectFault(other, "injected: copy back failed");
  util::callback(other, [] {});  // fails: the close behind it is dropped
  window.closeWhenReached(other);
  before.release();
  held->synchronize();  // the dropped close still closed the window: no hang
  CHECK(!window.isOpen());
  CHECK_THROWS_MSG(other->synchronize(), "injected: copy back failed");
}

TEST(peer_window_holds_no_engine) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  RuntimeStream* held = context->createStream();
  PeerAccessWindow window;
  window.enqueueOn(held, "allreduce");
  CHECK(window.waitOpen());
  RuntimeStream* other = context->createStream();
  std::atomic<int> ran{0};
  util::callback(other, [&ran] { ++ran; });
  other->synchronize();  // runs while the window is open
  CHECK_EQ(ran.load(), 1);
  window.close();
  held->synchronize();
}
