// Error latching, fault injection, and isolation of failed streams.
#include <atomic>
#include <stdexcept>

#include "util.hpp"

using flex::RuntimeContext;
using flex::RuntimeEvent;
using flex::RuntimeStream;
using flex::test::Gate;

TEST(error_failed_op_latches_the_stream) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  RuntimeStream* other = context->createStream();
  Gate gate;
  RuntimeEvent event;
  std::atomic<bool> later_ran{false};
  gate.enqueueOn(stream);
  util::compute(stream, [] { throw std::runtime_error("boom: kernel failed"); });
  util::callback(stream, [&later_ran] { later_ran = true; });
  event.record(stream);  // discarded, but still completes
  util::callback(stream, [&later_ran] { later_ran = true; });
  event.wait(other);
  CHECK(!stream->needsShutdown());
  CHECK(!context->hasStreamError());
  gate.release();

  other->synchronize();  // released by the discarded record
  CHECK(event.query());
  CHECK_THROWS_MSG(stream->synchronize(), "boom: kernel failed");
  stream->synchronize();  // reported once
  CHECK(stream->query());
  CHECK(!later_ran.load());
  CHECK(stream->needsShutdown());
  CHECK(context->hasStreamError());
  CHECK_EQ(stream->errorMessage(), std::string("boom: kernel failed"));
  CHECK_EQ(flex::test::launchedOps(stream), 5u);
  CHECK_EQ(flex::test::completedOps(stream), 5u);
  CHECK_THROWS_MSG(util::callback(stream, [] {}),
                   "Cannot schedule operation on stream in error state: boom: kernel failed");
  CHECK_THROWS_MSG(event.record(stream), "Cannot schedule operation on stream in error state");
  CHECK_EQ(flex::test::launchedOps(stream), 5u);
}

TEST(error_query_reports_the_failure_once) {
  RuntimeStream* stream = util::context()->createStream();
  util::callback(stream, [] { throw std::logic_error("callback failed"); });
  WAIT_UNTIL(stream->needsShutdown());
  CHECK_THROWS_MSG(stream->query(), "callback failed");
  CHECK(stream->query());
  stream->synchronize();
  CHECK(stream->needsShutdown());
}

TEST(error_other_streams_keep_working) {
  RuntimeContext* context = util::context();
  RuntimeStream* failing = context->createStream();
  RuntimeStream* healthy = context->createStream();
  util::compute(failing, [] { throw std::runtime_error("bad"); });
  CHECK_THROWS_MSG(failing->synchronize(), "bad");
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) util::callback(healthy, [&done] { ++done; });
  healthy->synchronize();
  CHECK_EQ(done.load(), 10);
  CHECK(!healthy->needsShutdown());
  CHECK(healthy->errorMessage().empty());
  CHECK(context->hasStreamError());
}

TEST(error_non_standard_exception_is_contained) {
  RuntimeStream* stream = util::context()->createStream();
  util::compute(stream, [] { throw 42; });
  CHECK_THROWS_MSG(stream->synchronize(), "not a std::exception");
}

TEST(error_dma_callback_failure_latches) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(8);
  uint64_t value = 1;
  flex::CompositeAddress address(dev, 8);
  flex::DmaParams params(&value, 8, true, &address);
  params.callback = [] { throw std::runtime_error("dma callback"); };
  stream->launchOperationH2D(&params);
  CHECK_THROWS_MSG(stream->synchronize(), "dma callback");
}

TEST(error_injected_fault_fails_the_next_operation) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> ran{0};
  util::callback(stream, [&ran] { ++ran; });
  stream->synchronize();
  Gate gate;  // holds the stream so both callbacks are queued before the fault hits
  gate.enqueueOn(stream);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  flex::test::injectFault(stream, "injected: card fell over");
  util::callback(stream, [&ran] { ++ran; });
  util::callback(stream, [&ran] { ++ran; });
  gate.release();
  CHECK_THROWS_MSG(stream->synchronize(), "injected: card fell over");
  CHECK_EQ(ran.load(), 1);
  CHECK_EQ(stream->errorMessage(), std::string("injected: card fell over"));
}

// ComputeParams::on_discard: called for each compute the stream drops unrun
// (the faulted one and those queued behind it), never for one that ran.
TEST(error_discarded_computes_call_their_on_discard) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> ran{0};
  int discarded[3] = {0, 0, 0};
  auto launch = [&](int k) {
    flex::ComputeParams params;
    params.fn = [&ran] { ++ran; };
    params.on_discard = [](void* count) { ++*static_cast<int*>(count); };
    params.discard_arg = &discarded[k];
    stream->launchOperationCompute(std::move(params));
  };
  launch(0);
  stream->synchronize();
  Gate gate;
  gate.enqueueOn(stream);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  flex::test::injectFault(stream, "injected: discard");
  launch(1);  // faulted: never runs
  launch(2);  // behind it: discarded
  gate.release();
  CHECK_THROWS_MSG(stream->synchronize(), "injected: discard");
  CHECK_EQ(ran.load(), 1);
  CHECK_EQ(discarded[0], 0);
  CHECK_EQ(discarded[1], 1);
  CHECK_EQ(discarded[2], 1);
}

TEST(error_injected_fault_on_a_record_still_completes_it) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  RuntimeStream* other = context->createStream();
  RuntimeEvent event;
  Gate gate;
  gate.enqueueOn(stream);
  event.record(stream);
  event.wait(other);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  flex::test::injectFault(stream, "record fault");
  gate.release();  // the fault hits the record, the next operation
  other->synchronize();
  CHECK(event.query());
  CHECK_THROWS_MSG(stream->synchronize(), "record fault");
}

TEST(error_fault_after_n_operations) {
  util::setEnv("FLEX_STUB_FAULT_AFTER", "3");
  RuntimeContext* context = util::context();
  RuntimeStream* a = context->createStream();
  RuntimeStream* b = context->createStream();
  std::atomic<int> ran{0};
  for (int i = 0; i < 3; ++i) util::callback(a, [&ran] { ++ran; });
  a->synchronize();
  util::callback(b, [&ran] { ++ran; });
  CHECK_THROWS_MSG(b->synchronize(), "flex: injected fault (FLEX_STUB_FAULT_AFTER=3)");
  CHECK_EQ(ran.load(), 3);
  util::callback(a, [&ran] { ++ran; });  // only one operation fails
  a->synchronize();
  CHECK_EQ(ran.load(), 4);
  CHECK(!a->needsShutdown());
}

TEST(error_fault_after_zero_fails_the_first_operation) {
  util::setEnv("FLEX_STUB_FAULT_AFTER", "0");
  RuntimeStream* stream = util::context()->getDefaultStream();
  stream->launchOperationDelay(std::chrono::nanoseconds(0));
  CHECK_THROWS_MSG(stream->synchronize(), "FLEX_STUB_FAULT_AFTER=0");
}
