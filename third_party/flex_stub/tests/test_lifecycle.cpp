// Process exit with work in flight, the runtime after shutdown, and fork.
#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "util.hpp"

using flex::RuntimeContext;
using flex::RuntimeStream;

TEST(shutdown_exit_with_queued_work_neither_crashes_nor_hangs) {
  const auto start = util::Clock::now();
  const int status = util::runInChild([] {
    RuntimeContext* context = util::context();
    RuntimeStream* sleeping = context->createStream();
    RuntimeStream* gated = context->createStream();
    RuntimeStream* waiting = context->createStream();
    for (int i = 0; i < 5; ++i) sleeping->launchOperationDelay(std::chrono::seconds(30));
    static flex::test::Gate gate;  // never released before exit
    gate.enqueueOn(gated);
    static flex::RuntimeEvent event;
    event.record(gated);
    event.wait(waiting);
    for (int i = 0; i < 1000; ++i) util::callback(waiting, [] {});
    // A host thread blocked in synchronize() when exit() runs.
    std::thread([sleeping] { sleeping->synchronize(); }).detach();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::exit(0);
    return 1;
  });
  CHECK_EQ(status, 0);
  CHECK(util::msSince(start) < 5000);
}

TEST(shutdown_then_launch_throws_and_waits_return) {
  // A host thread keeps using the runtime while exit() shuts it down; an
  // operation running on an engine holds the shutdown at step 2 until the
  // thread has checked everything, then the child reports through its status.
  const int status = util::runInChild([] {
    static std::atomic<int> verdict{-1};
    RuntimeContext* context = util::context();
    RuntimeStream* holder = context->createStream();
    RuntimeStream* probe = context->createStream();
    static flex::test::Gate gate;
    gate.enqueueOn(probe);  // probe has queued work during shutdown
    util::callback(probe, [] {});
    void* memory = context->allocate(64);
    util::compute(holder, [] {
      const auto begin = util::Clock::now();
      while (verdict.load() < 0 && util::msSince(begin) < 10000) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
    std::thread([context, probe, memory] {
      int result = 0;
      for (;;) {
        try {
          util::callback(probe, [] {});
        } catch (const flex::Error& e) {
          if (std::string(e.what()) != "flex runtime is shut down") result = 10;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      const auto start = util::Clock::now();
      probe->synchronize();  // queued work, but returns at once
      probe->query();
      if (util::msSince(start) > 1000) result = 11;
      try {
        context->deallocate(memory);
      } catch (const std::exception&) {
        result = 12;
      }
      verdict = result;
      std::_Exit(result == 0 ? 0 : result);
    }).detach();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::exit(50);  // not the reported status: the probe thread exits first
    return 1;
  });
  CHECK_EQ(status, 0);
}

TEST(shutdown_cuts_running_delays_short) {
  const auto start = util::Clock::now();
  const int status = util::runInChild([] {
    RuntimeStream* stream = util::context()->createStream();
    stream->launchOperationDelay(std::chrono::seconds(60));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::exit(0);
    return 1;
  });
  CHECK_EQ(status, 0);
  CHECK(util::msSince(start) < 5000);
}

TEST(shutdown_survives_an_engine_ended_by_pthread_exit) {
  // What Python does to a thread that needs the GIL after finalization: the
  // forced unwind must pass through the engine instead of terminating.
  const int status = util::runInChild([] {
    RuntimeStream* stream = util::context()->createStream();
    util::compute(stream, [] { pthread_exit(nullptr); });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    RuntimeStream* other = util::context()->createStream();  // other streams still run
    util::callback(other, [] {});
    other->synchronize();
    std::exit(0);
    return 1;
  });
  CHECK_EQ(status, 0);
}

TEST(fork_child_cannot_use_the_runtime) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  util::callback(stream, [] {});
  stream->synchronize();
  flex::RuntimeEvent event;
  event.record(stream);
  const int status = util::runInChild([context, stream, &event] {
    const char* message = "flex: the runtime cannot be used in a forked child process";
    int failures = 0;
    auto expectThrow = [&](auto&& call) {
      try {
        call();
        ++failures;
      } catch (const flex::Error& e) {
        if (std::string(e.what()) != message) ++failures;
      }
    };
    expectThrow([&] { util::callback(stream, [] {}); });
    expectThrow([&] { stream->synchronize(); });
    expectThrow([&] { stream->query(); });
    expectThrow([&] { RuntimeContext::create(0); });
    expectThrow([&] { context->createStream(); });
    expectThrow([&] { event.synchronize(); });
    expectThrow([&] { event.record(stream); });
    void* memory = context->allocate(128);  // memory calls keep working
    if (!context->isDevicePtr(memory)) ++failures;
    context->deallocate(memory);
    return failures;
  });
  CHECK_EQ(status, 0);
  util::callback(stream, [] {});  // the parent is unaffected
  stream->synchronize();
}

TEST(fork_child_of_a_process_without_context_may_create_one) {
  const int status = util::runInChild([] {
    RuntimeStream* stream = util::context()->createStream();
    int value = 0;
    util::callback(stream, [&value] { value = 7; });
    stream->synchronize();
    return value == 7 ? 0 : 1;
  });
  CHECK_EQ(status, 0);
}
