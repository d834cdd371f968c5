// Emulated device time: sleeping, never burning CPU; DMA pacing.
#include <vector>

#include "util.hpp"

using flex::CompositeAddress;
using flex::DmaParams;
using flex::RuntimeStream;

TEST(delays_sleep_without_burning_cpu) {
  auto* context = util::context();
  RuntimeStream* a = context->createStream();
  RuntimeStream* b = context->createStream();
  const double cpu_before = util::cpuMs();
  const auto start = util::Clock::now();
  a->launchOperationDelay(std::chrono::milliseconds(300));
  b->launchOperationDelay(std::chrono::milliseconds(300));
  a->synchronize();
  b->synchronize();
  const double wall = util::msSince(start);
  CHECK(wall >= 299);
  CHECK(wall < 590);  // the two delays overlapped
  CHECK(util::cpuMs() - cpu_before < 60);
}

TEST(dma_rate_paces_transfers) {
  util::setEnv("FLEX_STUB_DMA_GBPS", "0.05");  // 5e7 bytes/s: 5 MB take 100 ms
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  const size_t bytes = 5000000;
  void* dev = context->allocate(bytes);
  std::vector<uint8_t> host(bytes, 3);
  CompositeAddress address(dev, bytes);
  DmaParams up(host.data(), bytes, true, &address);
  DmaParams down(host.data(), bytes, false, &address);
  const double cpu_before = util::cpuMs();
  const auto start = util::Clock::now();
  stream->launchOperationH2D(&up);
  stream->synchronize();
  const double up_ms = util::msSince(start);
  stream->launchOperationD2H(&down);
  stream->synchronize();
  const double total_ms = util::msSince(start);
  CHECK(up_ms >= 99);
  CHECK(total_ms >= 199);
  CHECK(total_ms < 2000);
  CHECK(util::cpuMs() - cpu_before < 100);  // the memcpy, then sleep
}

TEST(dma_without_rate_runs_at_memcpy_speed) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  const size_t bytes = 5000000;
  void* dev = context->allocate(bytes);
  std::vector<uint8_t> host(bytes, 3);
  CompositeAddress address(dev, bytes);
  DmaParams up(host.data(), bytes, true, &address);
  const auto start = util::Clock::now();
  stream->launchOperationH2D(&up);
  stream->synchronize();
  CHECK(util::msSince(start) < 500);  // no pacing: well under the 100 ms a 0.05 GB/s rate takes
}
