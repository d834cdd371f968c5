// flex::test::Gate semantics.
#include <atomic>
#include <memory>

#include "util.hpp"

using flex::RuntimeStream;
using flex::test::Gate;

TEST(gate_blocks_every_stream_until_released) {
  auto* context = util::context();
  RuntimeStream* a = context->createStream();
  RuntimeStream* b = context->createStream();
  Gate gate;
  CHECK_EQ(gate.blockedStreams(), 0);
  std::atomic<int> ran{0};
  gate.enqueueOn(a);
  gate.enqueueOn(b);
  util::callback(a, [&ran] { ++ran; });
  util::callback(b, [&ran] { ++ran; });
  WAIT_UNTIL(gate.blockedStreams() == 2);
  CHECK_EQ(ran.load(), 0);
  gate.release();
  a->synchronize();
  b->synchronize();
  CHECK_EQ(ran.load(), 2);
  CHECK_EQ(gate.blockedStreams(), 0);
}

TEST(gate_counts_only_streams_that_reached_it) {
  RuntimeStream* stream = util::context()->createStream();
  Gate first;
  Gate second;
  first.enqueueOn(stream);
  second.enqueueOn(stream);
  WAIT_UNTIL(first.blockedStreams() == 1);
  CHECK_EQ(second.blockedStreams(), 0);
  first.release();
  WAIT_UNTIL(second.blockedStreams() == 1);
  second.release();
  stream->synchronize();
}

TEST(gate_release_twice_is_harmless_and_released_gate_passes) {
  RuntimeStream* stream = util::context()->createStream();
  Gate gate;
  gate.enqueueOn(stream);
  gate.release();
  gate.release();
  stream->synchronize();
  gate.enqueueOn(stream);
  stream->synchronize();
  CHECK_EQ(flex::test::completedOps(stream), 2u);
}

TEST(gate_destroyed_unreleased_releases) {
  RuntimeStream* stream = util::context()->createStream();
  auto gate = std::make_unique<Gate>();
  gate->enqueueOn(stream);
  WAIT_UNTIL(gate->blockedStreams() == 1);
  gate.reset();
  stream->synchronize();
  CHECK(stream->query());
}

TEST(gate_holds_no_engine) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  Gate gate;
  std::vector<RuntimeStream*> gated;
  for (int i = 0; i < 4; ++i) {
    gated.push_back(context->createStream());
    gate.enqueueOn(gated.back());
  }
  WAIT_UNTIL(gate.blockedStreams() == 4);
  RuntimeStream* free_stream = context->createStream();
  util::callback(free_stream, [] {});
  free_stream->synchronize();
  gate.release();
  for (RuntimeStream* stream : gated) stream->synchronize();
}
