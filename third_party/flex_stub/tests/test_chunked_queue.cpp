// The operation queue's container (src/chunked_queue.hpp): order across chunks, chunk reuse.
#include <memory>
#include <vector>

#include "../src/chunked_queue.hpp"
#include "harness.hpp"

using flex::detail::ChunkedQueue;

TEST(chunked_queue_keeps_fifo_order_across_chunks) {
  ChunkedQueue<int> queue;
  std::vector<int> popped;
  int next = 0;
  // Three in, two out: the queue deepens across many chunk boundaries.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i) queue.push_back(int(next++));
    for (int i = 0; i < 2; ++i) popped.push_back(queue.pop_front());
  }
  CHECK_EQ(queue.size(), 200u);
  CHECK_EQ(queue.front(), 400);
  while (!queue.empty()) popped.push_back(queue.pop_front());
  CHECK_EQ(popped.size(), 600u);
  for (int i = 0; i < 600; ++i) CHECK_EQ(popped[i], i);
}

TEST(chunked_queue_shallow_queue_uses_one_chunk) {
  ChunkedQueue<int> queue;
  for (int i = 0; i < 1000; ++i) {
    queue.push_back(int(i));
    CHECK_EQ(queue.pop_front(), i);
  }
  CHECK_EQ(queue.chunks(), 1u);
}

TEST(chunked_queue_deep_queue_reuses_its_chunks) {
  const size_t depth = 24 * ChunkedQueue<int>::kChunk;
  ChunkedQueue<int> queue;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < depth; ++i) queue.push_back(int(i));
    CHECK_EQ(queue.chunks(), 24u);
    for (size_t i = 0; i < depth; ++i) CHECK_EQ(queue.pop_front(), int(i));
    CHECK(queue.empty());
  }
  CHECK_EQ(queue.chunks(), 24u);
}

TEST(chunked_queue_pop_moves_out_and_destruction_frees_what_is_queued) {
  auto held = std::make_shared<int>(7);
  {
    ChunkedQueue<std::shared_ptr<int>> queue;
    for (int i = 0; i < 40; ++i) queue.push_back(std::shared_ptr<int>(held));
    CHECK_EQ(held.use_count(), 41);
    for (int i = 0; i < 35; ++i) queue.pop_front();  // each dropped at once
    CHECK_EQ(held.use_count(), 6);
  }
  CHECK_EQ(held.use_count(), 1);
}
