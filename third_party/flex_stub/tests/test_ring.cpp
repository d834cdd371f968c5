// The operation queue's container (src/ring.hpp): order across chunks, chunk reuse.
#include <memory>
#include <vector>

#include "../src/ring.hpp"
#include "harness.hpp"

using flex::detail::Ring;

TEST(ring_keeps_fifo_order_across_chunks) {
  Ring<int> ring;
  std::vector<int> popped;
  int next = 0;
  // Three in, two out: the queue deepens across many chunk boundaries.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i) ring.push_back(int(next++));
    for (int i = 0; i < 2; ++i) popped.push_back(ring.pop_front());
  }
  CHECK_EQ(ring.size(), 200u);
  CHECK_EQ(ring.front(), 400);
  while (!ring.empty()) popped.push_back(ring.pop_front());
  CHECK_EQ(popped.size(), 600u);
  for (int i = 0; i < 600; ++i) CHECK_EQ(popped[i], i);
}

TEST(ring_shallow_queue_uses_one_chunk) {
  Ring<int> ring;
  for (int i = 0; i < 1000; ++i) {
    ring.push_back(int(i));
    CHECK_EQ(ring.pop_front(), i);
  }
  CHECK_EQ(ring.chunks(), 1u);
}

TEST(ring_deep_queue_reuses_its_chunks) {
  const size_t depth = 24 * Ring<int>::kChunk;
  Ring<int> ring;
  for (int pass = 0; pass < 3; ++pass) {
    for (size_t i = 0; i < depth; ++i) ring.push_back(int(i));
    CHECK_EQ(ring.chunks(), 24u);
    for (size_t i = 0; i < depth; ++i) CHECK_EQ(ring.pop_front(), int(i));
    CHECK(ring.empty());
  }
  CHECK_EQ(ring.chunks(), 24u);
}

TEST(ring_pop_moves_out_and_destruction_frees_what_is_queued) {
  auto held = std::make_shared<int>(7);
  {
    Ring<std::shared_ptr<int>> ring;
    for (int i = 0; i < 40; ++i) ring.push_back(std::shared_ptr<int>(held));
    CHECK_EQ(held.use_count(), 41);
    for (int i = 0; i < 35; ++i) ring.pop_front();  // each dropped at once
    CHECK_EQ(held.use_count(), 6);
  }
  CHECK_EQ(held.use_count(), 1);
}
