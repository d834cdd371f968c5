// DMA engines: large copies split across FLEX_STUB_DMA_ENGINES threads, with
// every byte in place, in stream order, when the operation completes.
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "util.hpp"

using flex::CompositeAddress;
using flex::D2DParams;
using flex::DmaParams;
using flex::RuntimeContext;
using flex::RuntimeStream;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Bytes that differ from their neighbours and from other seeds' bytes.
std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> data(n);
  uint32_t state = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = static_cast<uint8_t>(state >> 24);
  }
  return data;
}

void h2d(RuntimeStream* stream, const void* host, size_t size, const CompositeAddress& dev,
         size_t offset = 0) {
  DmaParams params(const_cast<void*>(host), size, true, &dev);
  params.dev_offset = offset;
  stream->launchOperationH2D(&params);
}

void d2h(RuntimeStream* stream, void* host, size_t size, const CompositeAddress& dev,
         size_t offset = 0, std::function<void()> callback = {}) {
  DmaParams params(host, size, false, &dev);
  params.dev_offset = offset;
  params.callback = std::move(callback);
  stream->launchOperationD2H(&params);
}

void d2d(RuntimeStream* stream, const CompositeAddress& src, size_t src_offset,
         const CompositeAddress& dst, size_t dst_offset, size_t size) {
  D2DParams params;
  params.src = src;
  params.src_offset = src_offset;
  params.dst = dst;
  params.dst_offset = dst_offset;
  params.size = size;
  stream->launchOperationD2D(&params);
}

// Copies `bytes` up and back on a new stream.
void roundTrip(RuntimeContext* context, size_t bytes) {
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(bytes);
  const CompositeAddress address(dev, bytes);
  const std::vector<uint8_t> source = pattern(bytes, 1);
  std::vector<uint8_t> back(bytes, 0);
  h2d(stream, source.data(), bytes, address);
  d2h(stream, back.data(), bytes, address);
  stream->synchronize();
  CHECK(back == source);
  context->deallocate(dev);
}

}  // namespace

TEST(dma_large_copy_is_shared_by_every_dma_engine) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
  RuntimeContext* context = util::context();
  const int base = util::baselineThreadCount();
  roundTrip(context, 64 * kMiB);
  // The stream's engine plus 3 workers copied a quarter each.
  CHECK_EQ(util::threadCount(), base + 1 + 3);
  roundTrip(context, 64 * kMiB);  // workers are reused
  CHECK_EQ(util::threadCount(), base + 1 + 3);
}

TEST(dma_small_copy_runs_on_the_engine_alone) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
  RuntimeContext* context = util::context();
  const int base = util::baselineThreadCount();
  roundTrip(context, 2 * kMiB - 1);  // under two 1 MiB parts: not split
  CHECK_EQ(util::threadCount(), base + 1);
  roundTrip(context, 3 * kMiB);  // three parts: two workers
  CHECK_EQ(util::threadCount(), base + 1 + 2);
}

TEST(dma_one_engine_never_starts_a_worker) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "1");
  RuntimeContext* context = util::context();
  const int base = util::baselineThreadCount();
  roundTrip(context, 64 * kMiB);
  CHECK_EQ(util::threadCount(), base + 1);
}

TEST(dma_engines_default_to_the_available_cores) {
  RuntimeContext* context = util::context();
  const int base = util::baselineThreadCount();
  cpu_set_t set;
  CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int parts = std::min(CPU_COUNT(&set), 64);  // 64 MiB makes at most 64 parts
  roundTrip(context, 64 * kMiB);
  CHECK_EQ(util::threadCount(), base + 1 + (parts - 1));
}

TEST(dma_engines_variable_is_validated) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "many");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_DMA_ENGINES='many' is not an integer");
  util::setEnv("FLEX_STUB_DMA_ENGINES", "0");
  CHECK_THROWS_MSG(RuntimeContext::create(0),
                   "FLEX_STUB_DMA_ENGINES='0' is out of range: it must be >= 1 and <= 1024");
}

TEST(dma_split_copy_across_chunks_and_offsets_is_exact) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "3");
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  // A composite address of three chunks of odd sizes; the copy starts inside
  // the first and ends inside the last, so parts cross chunk boundaries.
  const std::vector<size_t> sizes = {3 * kMiB + 17, 2 * kMiB + 4093, 5 * kMiB + 1};
  CompositeAddress address;
  size_t total = 0;
  for (size_t size : sizes) {
    address.chunks.push_back({context->allocate(size), size});
    total += size;
  }
  const size_t offset = 1234;
  const size_t bytes = total - offset - 999;
  const std::vector<uint8_t> zeros(total, 0);
  const std::vector<uint8_t> source = pattern(bytes, 2);
  std::vector<uint8_t> whole(total, 0xEE);
  h2d(stream, zeros.data(), total, address);
  h2d(stream, source.data(), bytes, address, offset);
  d2h(stream, whole.data(), total, address);
  stream->synchronize();
  CHECK(std::all_of(whole.begin(), whole.begin() + offset, [](uint8_t b) { return b == 0; }));
  CHECK(std::memcmp(whole.data() + offset, source.data(), bytes) == 0);
  CHECK(std::all_of(whole.begin() + offset + bytes, whole.end(), [](uint8_t b) { return b == 0; }));
  for (const auto& chunk : address.chunks) context->deallocate(chunk.device_ptr);
}

TEST(dma_split_d2d_is_exact_and_overlapping_d2d_still_moves) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  const size_t bytes = 16 * kMiB + 12345;
  void* a = context->allocate(bytes);
  void* b = context->allocate(bytes);
  const CompositeAddress in_a(a, bytes);
  const CompositeAddress in_b(b, bytes);
  const std::vector<uint8_t> source = pattern(bytes, 3);
  std::vector<uint8_t> back(bytes, 0);
  h2d(stream, source.data(), bytes, in_a);
  d2d(stream, in_a, 0, in_b, 0, bytes);
  d2h(stream, back.data(), bytes, in_b);
  stream->synchronize();
  CHECK(back == source);
  // Shift b's bytes up by one inside b: source and destination overlap.
  d2d(stream, in_b, 0, in_b, 1, bytes - 1);
  d2h(stream, back.data(), bytes, in_b);
  stream->synchronize();
  CHECK_EQ(back[0], source[0]);
  CHECK(std::memcmp(back.data() + 1, source.data(), bytes - 1) == 0);
  context->deallocate(a);
  context->deallocate(b);
}

TEST(dma_split_copies_complete_in_stream_order_on_two_streams) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
  RuntimeContext* context = util::context();
  RuntimeStream* first = context->createStream();
  RuntimeStream* second = context->createStream();
  const size_t bytes = 24 * kMiB;
  struct Lane {
    RuntimeStream* stream;
    void* dev;
    std::vector<uint8_t> a, b, back;
    std::atomic<bool> callback_saw_every_byte{false};
    std::atomic<bool> compute_saw_every_byte{false};
  };
  Lane lanes[2] = {{first, context->allocate(bytes), pattern(bytes, 10), pattern(bytes, 11),
                    std::vector<uint8_t>(bytes, 0)},
                   {second, context->allocate(bytes), pattern(bytes, 20), pattern(bytes, 21),
                    std::vector<uint8_t>(bytes, 0)}};
  for (int round = 0; round < 3; ++round) {
    for (Lane& lane : lanes) {
      const CompositeAddress address(lane.dev, bytes);
      // Two writes to the same bytes: the second must land last.
      h2d(lane.stream, lane.a.data(), bytes, address);
      h2d(lane.stream, lane.b.data(), bytes, address);
      d2h(lane.stream, lane.back.data(), bytes, address, 0,
          [&lane] { lane.callback_saw_every_byte = lane.back == lane.b; });
      util::compute(lane.stream, [&lane] { lane.compute_saw_every_byte = lane.back == lane.b; });
    }
    for (Lane& lane : lanes) {
      lane.stream->synchronize();
      CHECK(lane.callback_saw_every_byte.load());
      CHECK(lane.compute_saw_every_byte.load());
      std::fill(lane.back.begin(), lane.back.end(), 0);
      lane.callback_saw_every_byte = false;
      lane.compute_saw_every_byte = false;
    }
  }
  for (Lane& lane : lanes) context->deallocate(lane.dev);
}

TEST(dma_split_copy_keeps_the_dma_rate) {
  util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
  util::setEnv("FLEX_STUB_DMA_GBPS", "0.2");  // 2e8 bytes/s: 20 MB take 100 ms
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  const size_t bytes = 20000000;
  void* dev = context->allocate(bytes);
  const std::vector<uint8_t> source = pattern(bytes, 4);
  const auto start = util::Clock::now();
  h2d(stream, source.data(), bytes, CompositeAddress(dev, bytes));
  stream->synchronize();
  const double ms = util::msSince(start);
  CHECK(ms >= 99);
  CHECK(ms < 2000);
  context->deallocate(dev);
}

TEST(dma_exit_during_split_copies_neither_crashes_nor_hangs) {
  const auto start = util::Clock::now();
  const int status = util::runInChild([] {
    util::setEnv("FLEX_STUB_DMA_ENGINES", "4");
    RuntimeContext* context = util::context();
    // Leaked: queued copies read it until the runtime has shut down.
    const auto* host = new std::vector<uint8_t>(32 * kMiB, 7);
    for (int s = 0; s < 3; ++s) {
      RuntimeStream* stream = context->createStream();
      void* dev = context->allocate(host->size());
      for (int i = 0; i < 20; ++i) h2d(stream, host->data(), host->size(), {dev, host->size()});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::exit(0);
    return 1;
  });
  CHECK_EQ(status, 0);
  CHECK(util::msSince(start) < 10000);
}
