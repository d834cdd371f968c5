// Events: per-record completion states, cross-stream waits, timing.
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "util.hpp"

using flex::RuntimeEvent;
using flex::RuntimeStream;
using flex::test::Gate;

TEST(event_never_recorded_is_complete_and_wait_is_a_no_op) {
  RuntimeStream* stream = util::context()->createStream();
  RuntimeEvent event;
  CHECK(!event.recorded());
  CHECK(event.query());
  event.synchronize();
  event.wait(stream);
  CHECK_EQ(flex::test::launchedOps(stream), 0u);
  CHECK(stream->query());
}

TEST(event_record_query_and_host_synchronize) {
  RuntimeStream* stream = util::context()->createStream();
  Gate gate;
  RuntimeEvent event;
  gate.enqueueOn(stream);
  event.record(stream);
  CHECK(event.recorded());
  CHECK(!event.query());
  WAIT_UNTIL(gate.blockedStreams() == 1);
  CHECK(!event.query());
  std::thread releaser([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate.release();
  });
  event.synchronize();
  CHECK(event.query());
  releaser.join();
}

TEST(event_wait_orders_another_stream_without_blocking_the_host) {
  auto* context = util::context();
  RuntimeStream* producer = context->createStream();
  RuntimeStream* consumer = context->createStream();
  Gate gate;
  RuntimeEvent event;
  std::vector<int> order;
  std::mutex order_mutex;
  auto note = [&](int step) {
    std::lock_guard<std::mutex> lock(order_mutex);
    order.push_back(step);
  };
  gate.enqueueOn(producer);
  util::callback(producer, [&] { note(1); });
  event.record(producer);
  util::callback(consumer, [&] { note(0); });
  event.wait(consumer);
  util::callback(consumer, [&] { note(2); });
  WAIT_UNTIL(flex::test::completedOps(consumer) == 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!consumer->query());  // parked on the event, host not blocked
  gate.release();
  consumer->synchronize();
  CHECK(order == std::vector<int>({0, 1, 2}));
}

TEST(event_wait_before_rerecord_waits_for_the_earlier_record) {
  auto* context = util::context();
  RuntimeStream* first = context->createStream();
  RuntimeStream* waiter = context->createStream();
  RuntimeStream* second = context->createStream();
  Gate gate;
  RuntimeEvent event;
  gate.enqueueOn(first);
  event.record(first);
  event.wait(waiter);
  std::atomic<bool> waiter_ran{false};
  util::callback(waiter, [&] { waiter_ran = true; });
  event.record(second);  // completes at once: must not release the earlier wait
  second->synchronize();
  CHECK(event.query());  // the latest record is complete
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!waiter_ran.load());
  CHECK(!waiter->query());
  gate.release();
  waiter->synchronize();
  CHECK(waiter_ran.load());
}

TEST(event_wait_after_rerecord_waits_for_the_new_record) {
  auto* context = util::context();
  RuntimeStream* first = context->createStream();
  RuntimeStream* second = context->createStream();
  RuntimeStream* waiter = context->createStream();
  Gate gate;
  RuntimeEvent event;
  event.record(first);
  first->synchronize();
  gate.enqueueOn(second);
  event.record(second);
  CHECK(!event.query());
  event.wait(waiter);
  util::callback(waiter, [] {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(!waiter->query());
  gate.release();
  waiter->synchronize();
}

TEST(event_rerecord_while_waits_pending_neither_deadlocks_nor_releases_early) {
  auto* context = util::context();
  RuntimeStream* producer = context->createStream();
  RuntimeStream* consumer = context->createStream();
  RuntimeEvent event;
  std::atomic<int> produced{0};
  std::atomic<bool> early{false};
  for (int i = 1; i <= 300; ++i) {
    util::callback(producer, [&produced] { ++produced; });
    event.record(producer);
    event.wait(consumer);
    util::callback(consumer, [&produced, &early, i] {
      if (produced.load() < i) early = true;
    });
  }
  consumer->synchronize();
  producer->synchronize();
  CHECK(!early.load());
  CHECK_EQ(produced.load(), 300);
}

TEST(event_destroyed_while_record_and_wait_pending) {
  auto* context = util::context();
  RuntimeStream* producer = context->createStream();
  RuntimeStream* consumer = context->createStream();
  Gate gate;
  gate.enqueueOn(producer);
  {
    RuntimeEvent event(true, true);
    event.record(producer);
    event.wait(consumer);
  }
  std::atomic<bool> ran{false};
  util::callback(consumer, [&ran] { ran = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(!ran.load());
  gate.release();
  consumer->synchronize();
  producer->synchronize();
  CHECK(ran.load());
}

TEST(event_elapsed_time_measures_device_time) {
  RuntimeStream* stream = util::context()->createStream();
  RuntimeEvent start(true);
  RuntimeEvent end(true);
  start.record(stream);
  stream->launchOperationDelay(std::chrono::milliseconds(50));
  end.record(stream);
  end.synchronize();
  CHECK(start.timingEnabled());
  const double ms = start.elapsedTime(end);
  CHECK(ms >= 49.5);
  CHECK(ms < 1000);
  CHECK(end.elapsedTime(start) < 0);
}

TEST(event_timestamps_are_monotonic_and_strictly_increasing) {
  RuntimeStream* stream = util::context()->createStream();
  std::vector<std::unique_ptr<RuntimeEvent>> events;
  for (int i = 0; i < 50; ++i) {
    events.push_back(std::make_unique<RuntimeEvent>(true));
    events.back()->record(stream);
    util::callback(stream, [] {});
  }
  stream->synchronize();
  for (int i = 0; i + 1 < 50; ++i) CHECK(events[i]->elapsedTime(*events[i + 1]) > 0);
}

TEST(event_elapsed_time_errors) {
  RuntimeStream* stream = util::context()->createStream();
  RuntimeEvent timed(true);
  RuntimeEvent untimed(false);
  RuntimeEvent never(true);
  timed.record(stream);
  untimed.record(stream);
  stream->synchronize();
  CHECK_THROWS_MSG(timed.elapsedTime(untimed),
                   "timing-enabled events (start: timing, end: no timing)");
  CHECK_THROWS_MSG(timed.elapsedTime(never),
                   "recorded events (start: recorded, end: never recorded)");
  Gate gate;
  RuntimeEvent pending(true);
  gate.enqueueOn(stream);
  pending.record(stream);
  CHECK_THROWS_MSG(timed.elapsedTime(pending),
                   "completed events (start: complete, end: not complete)");
  gate.release();
  stream->synchronize();
  CHECK(timed.elapsedTime(pending) > 0);
}

TEST(event_blocking_synchronize_sleeps) {
  RuntimeStream* stream = util::context()->createStream();
  for (bool blocking : {true, false}) {
    RuntimeEvent event(false, blocking);
    stream->launchOperationDelay(std::chrono::milliseconds(150));
    event.record(stream);
    const double cpu_before = util::cpuMs();
    event.synchronize();
    CHECK(util::cpuMs() - cpu_before < 40);
    CHECK(event.query());
  }
}

TEST(event_null_stream_is_an_error) {
  util::context();
  RuntimeEvent event;
  CHECK_THROWS_MSG(event.record(nullptr), "RuntimeEvent::record: stream is null");
  CHECK_THROWS_MSG(event.wait(nullptr), "RuntimeEvent::wait: stream is null");
}
