// Stream ordering, completion tracking, synchronization and concurrency.
#include <atomic>
#include <vector>

#include "util.hpp"

using flex::RuntimeStream;
using flex::test::Gate;

TEST(stream_fifo_order) {
  RuntimeStream* stream = util::context()->createStream();
  std::vector<int> order;
  for (int i = 0; i < 2000; ++i) util::callback(stream, [&order, i] { order.push_back(i); });
  stream->synchronize();
  CHECK_EQ(order.size(), 2000u);
  for (int i = 0; i < 2000; ++i) CHECK_EQ(order[i], i);
}

TEST(stream_query_false_while_queued) {
  RuntimeStream* stream = util::context()->createStream();
  CHECK(stream->query());
  Gate gate;
  gate.enqueueOn(stream);
  util::callback(stream, [] {});
  CHECK(!stream->query());
  WAIT_UNTIL(gate.blockedStreams() == 1);
  CHECK(!stream->query());
  gate.release();
  stream->synchronize();
  CHECK(stream->query());
}

TEST(stream_query_false_while_last_op_runs) {
  // The queue is empty while the only operation runs: query() must still say busy.
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<bool> started{false};
  std::atomic<bool> finish{false};
  util::compute(stream, [&] {
    started = true;
    util::sleepUntilSet(finish);
  });
  WAIT_UNTIL(started.load());
  CHECK(!stream->query());
  CHECK_EQ(flex::test::completedOps(stream), 0u);
  finish = true;
  WAIT_UNTIL(stream->query());
  CHECK_EQ(flex::test::completedOps(stream), 1u);
}

TEST(stream_synchronize_waits_for_everything_launched_before) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> done{0};
  stream->launchOperationDelay(std::chrono::milliseconds(30));
  for (int i = 0; i < 100; ++i) util::callback(stream, [&done] { ++done; });
  stream->synchronize();
  CHECK_EQ(done.load(), 100);
  CHECK(stream->query());
  CHECK_EQ(flex::test::launchedOps(stream), 101u);
  CHECK_EQ(flex::test::completedOps(stream), 101u);
}

TEST(stream_idle_synchronize_is_fast_and_enqueues_nothing) {
  RuntimeStream* stream = util::context()->createStream();
  util::callback(stream, [] {});
  stream->synchronize();
  const uint64_t launched = flex::test::launchedOps(stream);
  const int iterations = 200000;
  const auto start = util::Clock::now();
  for (int i = 0; i < iterations; ++i) stream->synchronize();
  const double ns_per_call = util::msSince(start) * 1e6 / iterations;
  CHECK_EQ(flex::test::launchedOps(stream), launched);
  CHECK_EQ(flex::test::completedOps(stream), launched);
  CHECK(ns_per_call < 1000);
}

TEST(stream_synchronize_on_fresh_stream_returns) {
  RuntimeStream* stream = util::context()->createStream();
  stream->synchronize();
  CHECK(stream->query());
  CHECK_EQ(flex::test::launchedOps(stream), 0u);
}

TEST(streams_run_concurrently) {
  // Each operation waits for the other stream's operation to start: this only
  // finishes if both run at the same time.
  auto* context = util::context();
  RuntimeStream* a = context->createStream();
  RuntimeStream* b = context->createStream();
  std::atomic<int> started{0};
  std::atomic<bool> timed_out{false};
  auto rendezvous = [&] {
    ++started;
    const auto begin = util::Clock::now();
    while (started < 2) {
      if (util::msSince(begin) > 5000) {
        timed_out = true;
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  };
  util::compute(a, rendezvous);
  util::compute(b, rendezvous);
  a->synchronize();
  b->synchronize();
  CHECK(!timed_out.load());
}

TEST(stream_work_runs_concurrently_with_host) {
  RuntimeStream* stream = util::context()->createStream();
  const auto start = util::Clock::now();
  stream->launchOperationDelay(std::chrono::milliseconds(200));
  CHECK(util::msSince(start) < 100);
  CHECK(!stream->query());
  stream->synchronize();
  CHECK(util::msSince(start) >= 195);
}

TEST(stream_parked_at_gate_holds_no_engine) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  RuntimeStream* blocked = context->createStream();
  RuntimeStream* other = context->createStream();
  Gate gate;
  gate.enqueueOn(blocked);
  util::callback(blocked, [] {});
  WAIT_UNTIL(gate.blockedStreams() == 1);
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) util::callback(other, [&done] { ++done; });
  other->synchronize();
  CHECK_EQ(done.load(), 10);
  CHECK(!blocked->query());
  gate.release();
  blocked->synchronize();
}

TEST(stream_parked_on_event_holds_no_engine) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  RuntimeStream* producer = context->createStream();
  RuntimeStream* consumer = context->createStream();
  RuntimeStream* other = context->createStream();
  Gate gate;
  flex::RuntimeEvent event;
  gate.enqueueOn(producer);
  event.record(producer);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  util::callback(consumer, [] {});
  event.wait(consumer);
  util::callback(consumer, [] {});
  // The only engine moves straight on to the consumer's wait: were it to block
  // there instead of parking, `other` would never run.
  WAIT_UNTIL(flex::test::completedOps(consumer) == 1);
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) util::callback(other, [&done] { ++done; });
  other->synchronize();
  CHECK_EQ(done.load(), 10);
  CHECK(!consumer->query());
  gate.release();
  consumer->synchronize();
  CHECK(event.query());
}

TEST(engines_start_lazily_up_to_the_cap) {
  util::setEnv("FLEX_STUB_ENGINES", "2");
  auto* context = util::context();
  const int base = util::baselineThreadCount();
  std::atomic<bool> finish{false};
  std::atomic<int> running{0};
  std::vector<RuntimeStream*> streams;
  for (int i = 0; i < 4; ++i) streams.push_back(context->createStream());
  CHECK_EQ(util::threadCount(), base);
  for (RuntimeStream* stream : streams) {
    util::compute(stream, [&] {
      ++running;
      util::sleepUntilSet(finish);
      --running;
    });
  }
  WAIT_UNTIL(running.load() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_EQ(running.load(), 2);
  CHECK_EQ(util::threadCount(), base + 2);
  finish = true;
  for (RuntimeStream* stream : streams) stream->synchronize();
  CHECK_EQ(util::threadCount(), base + 2);
}

TEST(engines_unlimited_by_default_every_stream_runs_at_once) {
  auto* context = util::context();
  const int base = util::baselineThreadCount();
  const int count = 12;
  std::atomic<int> arrived{0};
  std::atomic<bool> timed_out{false};
  std::vector<RuntimeStream*> streams;
  for (int i = 0; i < count; ++i) streams.push_back(context->createStream());
  for (RuntimeStream* stream : streams) {
    util::compute(stream, [&] {
      ++arrived;
      const auto begin = util::Clock::now();
      while (arrived < count) {
        if (util::msSince(begin) > 5000) {
          timed_out = true;
          return;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
  }
  for (RuntimeStream* stream : streams) stream->synchronize();
  CHECK(!timed_out.load());
  CHECK_EQ(util::threadCount(), base + count);
}

TEST(stream_counters_track_launches_and_completions) {
  RuntimeStream* stream = util::context()->createStream();
  CHECK_EQ(flex::test::launchedOps(stream), 0u);
  Gate gate;
  gate.enqueueOn(stream);
  for (int i = 0; i < 5; ++i) util::callback(stream, [] {});
  CHECK_EQ(flex::test::launchedOps(stream), 6u);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  CHECK_EQ(flex::test::completedOps(stream), 0u);
  gate.release();
  stream->synchronize();
  CHECK_EQ(flex::test::completedOps(stream), 6u);
}

TEST(stream_synchronize_sleeps_instead_of_spinning) {
  RuntimeStream* stream = util::context()->createStream();
  stream->launchOperationDelay(std::chrono::milliseconds(300));
  const double cpu_before = util::cpuMs();
  stream->synchronize();
  CHECK(util::cpuMs() - cpu_before < 60);
}
