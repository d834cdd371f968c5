// Waits that fit the device (src/spin_wait.hpp): host waits and idle engines
// spin briefly, then park, so nothing burns CPU while it waits for long or
// while the process is idle, and round trips stay correct under contention.
#include <atomic>
#include <thread>
#include <vector>

#include "util.hpp"

using flex::RuntimeEvent;
using flex::RuntimeStream;
using flex::test::Gate;

namespace {

// Process CPU time over `ms` of wall time.
double cpuMsOver(int ms) {
  const double before = util::cpuMs();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return util::cpuMs() - before;
}

}  // namespace

TEST(idle_process_after_work_uses_no_cpu) {
  auto* context = util::context();
  std::vector<RuntimeStream*> streams;
  for (int i = 0; i < 8; ++i) streams.push_back(context->createStream());
  std::atomic<int> ran{0};
  for (int round = 0; round < 50; ++round) {
    for (RuntimeStream* s : streams) util::compute(s, [&ran] { ++ran; });
    RuntimeEvent event;
    event.record(streams[round % streams.size()]);
    event.synchronize();
    streams[round % streams.size()]->synchronize();
  }
  for (RuntimeStream* s : streams) s->synchronize();
  CHECK_EQ(ran.load(), 400);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // lingering ends within 50 us
  const double used = cpuMsOver(500);
  CHECK(used < 5.0);
}

TEST(a_host_wait_on_a_stream_spins_only_briefly_then_parks) {
  RuntimeStream* stream = util::context()->createStream();
  Gate gate;
  gate.enqueueOn(stream);
  std::atomic<int> ran{0};
  util::callback(stream, [&ran] { ++ran; });
  WAIT_UNTIL(gate.blockedStreams() == 1);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    stream->synchronize();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double used = cpuMsOver(300);
  CHECK(!returned.load());
  CHECK(used < 5.0);  // parked: a spinning waiter would show ~300 ms
  gate.release();
  waiter.join();
  CHECK(returned.load());
  CHECK_EQ(ran.load(), 1);
}

TEST(a_host_wait_on_an_event_spins_only_briefly_then_parks) {
  RuntimeStream* stream = util::context()->createStream();
  Gate gate;
  gate.enqueueOn(stream);
  RuntimeEvent event;
  event.record(stream);
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    event.synchronize();
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double used = cpuMsOver(300);
  CHECK(!returned.load());
  CHECK(used < 5.0);
  gate.release();
  waiter.join();
  CHECK(event.query());
}

// Host threads outnumber the engines, so claims race with engines that are
// lingering, going to sleep or waking: every round trip must still complete.
TEST(round_trips_from_many_threads_complete_with_few_engines) {
  util::setEnv("FLEX_STUB_ENGINES", "2");
  auto* context = util::context();
  constexpr int kThreads = 6;
  constexpr int kTrips = 2000;
  std::vector<std::thread> hosts;
  std::vector<int> done(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    RuntimeStream* stream = context->createStream(
        t % 2 == 0 ? flex::RuntimeStreamPriority::NORMAL : flex::RuntimeStreamPriority::HIGH);
    hosts.emplace_back([stream, t, &done] {
      int count = 0;
      for (int i = 0; i < kTrips; ++i) {
        util::compute(stream, [&count] { ++count; });
        if (i % 3 == 0) {
          RuntimeEvent event;
          event.record(stream);
          event.synchronize();
        } else {
          stream->synchronize();
        }
        if (count != i + 1) return;  // the wait returned before the op ran
      }
      done[t] = count;
    });
  }
  for (auto& host : hosts) host.join();
  CHECK_EQ(done, std::vector<int>(kThreads, kTrips));
  CHECK_EQ(context->properties().engines, 2u);
}
