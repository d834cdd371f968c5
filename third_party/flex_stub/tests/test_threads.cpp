// Thread safety: many host threads launching, recording, waiting and syncing.
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "util.hpp"

using flex::RuntimeEvent;
using flex::RuntimeStream;

TEST(threads_launch_record_wait_and_sync_concurrently) {
  auto* context = util::context();
  RuntimeStream* shared = context->createStream();
  const int threads = 8;
  const int rounds = 300;
  std::atomic<int> shared_ops{0};
  std::atomic<int> order_errors{0};
  std::atomic<int> early_waits{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      RuntimeStream* own = context->createStream(t % 2 ? flex::RuntimeStreamPriority::HIGH
                                                       : flex::RuntimeStreamPriority::NORMAL);
      auto last_seen = std::make_shared<int>(-1);  // touched only by `own`'s operations
      auto produced = std::make_shared<std::atomic<int>>(0);
      RuntimeEvent event;
      for (int i = 0; i < rounds; ++i) {
        util::callback(own, [&order_errors, last_seen, produced, i] {
          if (*last_seen != i - 1) ++order_errors;
          *last_seen = i;
          ++*produced;
        });
        util::callback(shared, [&shared_ops] { ++shared_ops; });
        if (i % 10 == 0) {
          event.record(own);
          event.wait(shared);
          util::callback(shared, [&early_waits, produced, i] {
            if (produced->load() < i + 1) ++early_waits;
          });
        }
        if (i % 50 == 0) own->synchronize();
        if (i % 75 == 0) shared->query();
      }
      own->synchronize();
      if (*last_seen != rounds - 1) ++order_errors;
    });
  }
  for (auto& worker : workers) worker.join();
  shared->synchronize();
  CHECK_EQ(order_errors.load(), 0);
  CHECK_EQ(early_waits.load(), 0);
  CHECK_EQ(shared_ops.load(), threads * rounds);
  CHECK_EQ(flex::test::launchedOps(shared), flex::test::completedOps(shared));
  CHECK(!context->hasStreamError());
}

TEST(threads_fifo_per_launching_thread_on_a_shared_stream) {
  RuntimeStream* shared = util::context()->createStream();
  const int threads = 8;
  std::vector<std::vector<int>> seen(threads);  // touched only by `shared`'s operations
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) {
        util::callback(shared, [&seen, t, i] { seen[t].push_back(i); });
      }
      shared->synchronize();
    });
  }
  for (auto& worker : workers) worker.join();
  for (const auto& values : seen) {
    CHECK_EQ(values.size(), 1000u);
    for (int i = 0; i < 1000; ++i) CHECK_EQ(values[i], i);
  }
}

TEST(threads_create_streams_concurrently) {
  auto* context = util::context();
  std::mutex mutex;
  std::set<uint64_t> ids;
  std::vector<std::thread> workers;
  for (int t = 0; t < 8; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        RuntimeStream* stream = context->createStream();
        std::lock_guard<std::mutex> lock(mutex);
        ids.insert(stream->streamId());
      }
    });
  }
  for (auto& worker : workers) worker.join();
  CHECK_EQ(ids.size(), 800u);
  CHECK_EQ(*ids.begin(), 1u);
  CHECK_EQ(*ids.rbegin(), 800u);
}

TEST(threads_synchronize_same_stream_from_many_threads) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> done{0};
  for (int round = 0; round < 50; ++round) {
    stream->launchOperationDelay(std::chrono::microseconds(200));
    util::callback(stream, [&done] { ++done; });
    std::vector<std::thread> waiters;
    for (int t = 0; t < 8; ++t) waiters.emplace_back([stream] { stream->synchronize(); });
    for (auto& waiter : waiters) waiter.join();
    CHECK_EQ(done.load(), round + 1);
  }
}
