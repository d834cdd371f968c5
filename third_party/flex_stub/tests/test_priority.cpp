// Scheduling under engine contention: priorities and round robin.
#include <mutex>
#include <string>
#include <vector>

#include "util.hpp"

using flex::RuntimeStream;
using flex::RuntimeStreamPriority;

TEST(priority_high_stream_overtakes_queued_normal_work) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  RuntimeStream* normal = context->createStream(RuntimeStreamPriority::NORMAL);
  RuntimeStream* high = context->createStream(RuntimeStreamPriority::HIGH);
  const auto start = util::Clock::now();
  double normal_ms = 0;
  double high_ms = 0;
  for (int i = 0; i < 6; ++i) normal->launchOperationDelay(std::chrono::milliseconds(100));
  util::callback(normal, [&] { normal_ms = util::msSince(start); });
  high->launchOperationDelay(std::chrono::milliseconds(100));
  util::callback(high, [&] { high_ms = util::msSince(start); });
  high->synchronize();
  normal->synchronize();
  CHECK(high_ms <= 250);
  CHECK(normal_ms >= 550);
}

TEST(priority_equal_streams_take_turns) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  RuntimeStream* a = context->createStream();
  RuntimeStream* b = context->createStream();
  std::mutex mutex;
  std::string order;
  auto note = [&](char c) {
    return [&, c] {
      std::lock_guard<std::mutex> lock(mutex);
      order += c;
    };
  };
  // The delay holds the only engine while both streams fill up.
  a->launchOperationDelay(std::chrono::milliseconds(100));
  for (int i = 0; i < 3; ++i) util::callback(a, note('a'));
  for (int i = 0; i < 3; ++i) util::callback(b, note('b'));
  a->synchronize();
  b->synchronize();
  CHECK_EQ(order, std::string("bababa"));
}

TEST(priority_fifo_within_each_stream_under_contention) {
  util::setEnv("FLEX_STUB_ENGINES", "1");
  auto* context = util::context();
  std::vector<RuntimeStream*> streams = {context->createStream(RuntimeStreamPriority::HIGH),
                                         context->createStream(), context->createStream()};
  std::vector<std::vector<int>> seen(streams.size());
  for (int i = 0; i < 200; ++i) {
    for (size_t s = 0; s < streams.size(); ++s) {
      util::callback(streams[s], [&seen, s, i] { seen[s].push_back(i); });
    }
  }
  for (RuntimeStream* stream : streams) stream->synchronize();
  for (const auto& values : seen) {
    CHECK_EQ(values.size(), 200u);
    for (int i = 0; i < 200; ++i) CHECK_EQ(values[i], i);
  }
}
