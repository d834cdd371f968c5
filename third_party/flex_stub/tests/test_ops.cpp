// Operations: DMA, device copies, fills, compute, callbacks, delays, and
// launch-time validation.
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "util.hpp"

using flex::CompositeAddress;
using flex::DataFormats;
using flex::DmaParams;
using flex::RuntimeContext;
using flex::RuntimeStream;

namespace {

std::vector<uint8_t> iota(size_t n, uint8_t first = 1) {
  std::vector<uint8_t> data(n);
  std::iota(data.begin(), data.end(), first);
  return data;
}

void h2d(RuntimeStream* stream, void* host, size_t size, void* dev, size_t dev_bytes,
         size_t offset = 0) {
  CompositeAddress address(dev, dev_bytes);
  DmaParams params(host, size, true, &address);
  params.dev_offset = offset;
  stream->launchOperationH2D(&params);
}

void d2h(RuntimeStream* stream, void* host, size_t size, void* dev, size_t dev_bytes,
         size_t offset = 0) {
  CompositeAddress address(dev, dev_bytes);
  DmaParams params(host, size, false, &address);
  params.dev_offset = offset;
  stream->launchOperationD2H(&params);
}

// Fills a fresh allocation with `value` and returns its bytes.
std::vector<uint8_t> filled(double value, DataFormats format, size_t bytes) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->getDefaultStream();
  void* dev = context->allocate(bytes);
  CompositeAddress address(dev, bytes);
  stream->fillAsync(&address, value, format);
  std::vector<uint8_t> host(bytes);
  d2h(stream, host.data(), bytes, dev, bytes);
  stream->synchronize();
  context->deallocate(dev);
  return host;
}

template <class T>
T firstElement(double value, DataFormats format) {
  const std::vector<uint8_t> bytes = filled(value, format, 8 * sizeof(T));
  T element;
  std::memcpy(&element, bytes.data(), sizeof element);
  for (size_t i = sizeof(T); i < bytes.size(); ++i) CHECK_EQ(bytes[i], bytes[i % sizeof(T)]);
  return element;
}

}  // namespace

TEST(dma_h2d_d2h_round_trip_with_device_offset) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(4096);
  const std::vector<uint8_t> source = iota(1000);
  std::vector<uint8_t> whole(4096, 0xEE);
  std::vector<uint8_t> back(1000, 0);
  std::vector<uint8_t> zeros(4096, 0);
  h2d(stream, zeros.data(), 4096, dev, 4096);
  h2d(stream, const_cast<uint8_t*>(source.data()), 1000, dev, 4096, 100);
  d2h(stream, back.data(), 1000, dev, 4096, 100);
  d2h(stream, whole.data(), 4096, dev, 4096);
  stream->synchronize();
  CHECK(back == source);
  CHECK_EQ(whole[99], 0);
  CHECK_EQ(whole[100], 1);
  CHECK_EQ(whole[1099], source[999]);
  CHECK_EQ(whole[1100], 0);
  context->deallocate(dev);
}

TEST(dma_callback_runs_after_the_copy_in_stream_order) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(64);
  std::vector<uint8_t> source = iota(64);
  std::vector<uint8_t> back(64, 0);
  std::vector<int> order;
  CompositeAddress address(dev, 64);
  DmaParams up(source.data(), 64, true, &address);
  up.callback = [&] { order.push_back(1); };
  stream->launchOperationH2D(&up);
  DmaParams down(back.data(), 64, false, &address);
  down.callback = [&] {
    order.push_back(back == source ? 2 : -2);
  };
  stream->launchOperationD2H(&down);
  util::callback(stream, [&] { order.push_back(3); });
  stream->synchronize();
  CHECK(order == std::vector<int>({1, 2, 3}));
}

TEST(d2d_copy_with_offsets) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* a = context->allocate(256);
  void* b = context->allocate(256);
  std::vector<uint8_t> source = iota(256);
  std::vector<uint8_t> back(256, 0);
  std::vector<uint8_t> zeros(256, 0);
  h2d(stream, source.data(), 256, a, 256);
  h2d(stream, zeros.data(), 256, b, 256);
  flex::D2DParams copy;
  copy.src = CompositeAddress(a, 256);
  copy.src_offset = 10;
  copy.dst = CompositeAddress(b, 256);
  copy.dst_offset = 20;
  copy.size = 100;
  stream->launchOperationD2D(&copy);
  d2h(stream, back.data(), 256, b, 256);
  stream->synchronize();
  CHECK_EQ(back[19], 0);
  for (int i = 0; i < 100; ++i) CHECK_EQ(back[20 + i], source[10 + i]);
  CHECK_EQ(back[120], 0);
}

TEST(composite_addresses_spanning_chunks) {
  // Two allocations form one composite address; copies cross the chunk boundary.
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* lo = context->allocate(100);
  void* hi = context->allocate(100);
  void* flat = context->allocate(200);
  CompositeAddress split;
  split.chunks = {{lo, 100}, {hi, 100}};
  std::vector<uint8_t> source = iota(150);
  DmaParams up(source.data(), 150, true, &split);
  up.dev_offset = 30;
  stream->launchOperationH2D(&up);
  flex::D2DParams copy;
  copy.src = split;
  copy.src_offset = 30;
  copy.dst = CompositeAddress(flat, 200);
  copy.size = 150;
  stream->launchOperationD2D(&copy);
  std::vector<uint8_t> back(150, 0);
  d2h(stream, back.data(), 150, flat, 200);
  std::vector<uint8_t> tail(30, 0);
  d2h(stream, tail.data(), 30, hi, 100);  // split bytes 100..129 = source 70..99
  stream->synchronize();
  CHECK(back == source);
  for (int i = 0; i < 30; ++i) CHECK_EQ(tail[i], source[70 + i]);
}

TEST(fill_fp32_and_integer_patterns) {
  CHECK_EQ(firstElement<float>(1.5, DataFormats::FP32), 1.5f);
  CHECK_EQ(firstElement<float>(0.1, DataFormats::FP32), 0.1f);
  CHECK_EQ(firstElement<int8_t>(-1, DataFormats::INT8), -1);
  CHECK_EQ(firstElement<int8_t>(127.9, DataFormats::INT8), 127);
  CHECK_EQ(firstElement<int16_t>(-300, DataFormats::INT16), -300);
  CHECK_EQ(firstElement<int32_t>(123456789, DataFormats::INT32), 123456789);
  CHECK_EQ(firstElement<int64_t>(-9007199254740993.0, DataFormats::INT64), -9007199254740992LL);
  CHECK_EQ(firstElement<int64_t>(std::nan(""), DataFormats::INT64), 0);
}

TEST(fill_fp16_rounds_to_nearest_even) {
  CHECK_EQ(firstElement<uint16_t>(1.0, DataFormats::FP16), 0x3c00);
  CHECK_EQ(firstElement<uint16_t>(-2.0, DataFormats::FP16), 0xc000);
  CHECK_EQ(firstElement<uint16_t>(0.1, DataFormats::FP16), 0x2e66);
  CHECK_EQ(firstElement<uint16_t>(65504, DataFormats::FP16), 0x7bff);
  CHECK_EQ(firstElement<uint16_t>(65520, DataFormats::FP16), 0x7c00);  // rounds up to inf
  CHECK_EQ(firstElement<uint16_t>(1 + std::ldexp(1, -11), DataFormats::FP16), 0x3c00);  // tie: even
  CHECK_EQ(firstElement<uint16_t>(1 + 3 * std::ldexp(1, -11), DataFormats::FP16), 0x3c02);
  CHECK_EQ(firstElement<uint16_t>(std::ldexp(1, -24), DataFormats::FP16), 0x0001);  // subnormal
  CHECK_EQ(firstElement<uint16_t>(std::ldexp(1, -26), DataFormats::FP16), 0x0000);
  CHECK_EQ(firstElement<uint16_t>(-0.0, DataFormats::FP16), 0x8000);
  CHECK_EQ(firstElement<uint16_t>(INFINITY, DataFormats::FP16), 0x7c00);
  CHECK_EQ(firstElement<uint16_t>(NAN, DataFormats::FP16) & 0x7e00, 0x7e00);
}

TEST(fill_bf16_rounds_to_nearest_even) {
  CHECK_EQ(firstElement<uint16_t>(1.0, DataFormats::BF16), 0x3f80);
  CHECK_EQ(firstElement<uint16_t>(-3.0, DataFormats::BF16), 0xc040);
  CHECK_EQ(firstElement<uint16_t>(1 + std::ldexp(1, -8), DataFormats::BF16), 0x3f80);  // tie: even
  CHECK_EQ(firstElement<uint16_t>(1 + 3 * std::ldexp(1, -8), DataFormats::BF16), 0x3f82);
  CHECK_EQ(firstElement<uint16_t>(0.1, DataFormats::BF16), 0x3dcd);
  CHECK_EQ(firstElement<uint16_t>(NAN, DataFormats::BF16) & 0x7fc0, 0x7fc0);
}

TEST(fill_bytes_sets_every_byte) {
  for (uint8_t byte : filled(7, DataFormats::BYTES, 1000)) CHECK_EQ(byte, 7);
  for (uint8_t byte : filled(1, DataFormats::BYTES, 3)) CHECK_EQ(byte, 1);
  for (uint8_t byte : filled(257, DataFormats::BYTES, 65)) CHECK_EQ(byte, 1);
}

TEST(fill_covers_large_and_split_ranges) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->getDefaultStream();
  // A 4-byte element split across chunks of 6 and 1000 bytes stays in phase.
  void* a = context->allocate(6);
  void* b = context->allocate(1002);
  CompositeAddress split;
  split.chunks = {{a, 6}, {b, 1002}};
  stream->fillAsync(&split, 1.0, DataFormats::FP32);
  std::vector<uint8_t> head(6);
  std::vector<uint8_t> rest(1002);
  d2h(stream, head.data(), 6, a, 6);
  d2h(stream, rest.data(), 1002, b, 1002);
  stream->synchronize();
  std::vector<uint8_t> all = head;
  all.insert(all.end(), rest.begin(), rest.end());
  for (size_t i = 0; i < all.size(); i += 4) {
    float value;
    std::memcpy(&value, &all[i], 4);
    CHECK_EQ(value, 1.0f);
  }
}

TEST(fill_rejects_partial_elements) {
  RuntimeContext* context = util::context();
  void* dev = context->allocate(10);
  CompositeAddress address(dev, 10);
  CHECK_THROWS_MSG(context->getDefaultStream()->fillAsync(&address, 1, DataFormats::FP32),
                   "10 bytes is not a whole number of 4-byte elements");
}

TEST(compute_runs_on_an_engine_thread) {
  RuntimeStream* stream = util::context()->createStream();
  std::thread::id ran_on;
  flex::ComputeParams params;
  params.fn = [&ran_on] { ran_on = std::this_thread::get_id(); };
  params.name = "kernel";
  params.bytes = 123;
  stream->launchOperationCompute(&params);
  stream->synchronize();
  CHECK(ran_on != std::thread::id());
  CHECK(ran_on != std::this_thread::get_id());
}

TEST(compute_taken_by_rvalue_moves_its_function) {
  RuntimeStream* stream = util::context()->createStream();
  auto token = std::make_shared<int>(7);
  int seen = 0;
  flex::ComputeParams params;
  params.fn = [token, &seen] { seen = *token; };
  params.name = "kernel";
  CHECK(token.use_count() == 2);
  stream->launchOperationCompute(std::move(params));
  CHECK(!params.fn);              // NOLINT(bugprone-use-after-move): the runtime took it,
  CHECK(token.use_count() <= 2);  // without a copy of the closure
  stream->synchronize();
  CHECK(seen == 7);
  flex::ComputeParams no_fn;
  no_fn.name = "matmul";
  CHECK_THROWS_MSG(stream->launchOperationCompute(std::move(no_fn)), "'matmul' has no function");
}

TEST(host_callbacks_and_compute_keep_stream_order) {
  RuntimeStream* stream = util::context()->createStream();
  std::vector<int> order;
  util::callback(stream, [&] { order.push_back(0); });
  util::compute(stream, [&] { order.push_back(1); });
  stream->launchOperationDelay(std::chrono::milliseconds(5));
  util::callback(stream, [&] { order.push_back(2); });
  stream->synchronize();
  CHECK(order == std::vector<int>({0, 1, 2}));
}

TEST(delay_occupies_the_stream) {
  RuntimeStream* stream = util::context()->createStream();
  const auto start = util::Clock::now();
  double callback_ms = 0;
  stream->launchOperationDelay(std::chrono::milliseconds(100));
  util::callback(stream, [&] { callback_ms = util::msSince(start); });
  stream->synchronize();
  CHECK(callback_ms >= 99);
  CHECK(callback_ms < 2000);
}

TEST(launch_parameters_are_copied_at_launch) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(64);
  void* other = context->allocate(64);
  std::vector<uint8_t> source = iota(64);
  flex::test::Gate gate;
  gate.enqueueOn(stream);
  {
    auto address = std::make_unique<CompositeAddress>(dev, 64);
    auto params = std::make_unique<DmaParams>(source.data(), 64, true, address.get());
    stream->launchOperationH2D(params.get());
    params->dev = CompositeAddress(other, 64);
    params->size = 1;
    address->chunks.clear();
  }  // both destroyed before the copy runs
  int calls = 0;
  {
    flex::HostCallbackParams params;
    params.fn = [&calls] { ++calls; };
    stream->launchOperationHostCallback(&params);
    params.fn = [&calls] { calls += 100; };
  }
  std::vector<uint8_t> back(64, 0);
  d2h(stream, back.data(), 64, dev, 64);
  gate.release();
  stream->synchronize();
  CHECK(back == source);
  CHECK_EQ(calls, 1);
}

TEST(launch_validation_names_the_bad_values) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->createStream();
  void* dev = context->allocate(128);
  std::vector<uint8_t> host(256);
  CompositeAddress address(dev, 128);

  CHECK_THROWS_MSG(stream->launchOperationH2D(nullptr), "launchOperationH2D: params is null");
  DmaParams null_host(nullptr, 16, true, &address);
  CHECK_THROWS_MSG(stream->launchOperationH2D(&null_host),
                   "launchOperationH2D: host pointer is null (size 16 bytes)");
  DmaParams too_big(host.data(), 200, false, &address);
  CHECK_THROWS_MSG(stream->launchOperationD2H(&too_big),
                   "offset 0 + size 200 exceeds the device address's 128 bytes");
  DmaParams past_end(host.data(), 64, true, &address);
  past_end.dev_offset = 100;
  CHECK_THROWS_MSG(stream->launchOperationH2D(&past_end), "offset 100 + size 64 exceeds");
  CompositeAddress lying(dev, 256);  // claims more than was allocated
  DmaParams outside(host.data(), 256, true, &lying);
  CHECK_THROWS_MSG(stream->launchOperationH2D(&outside),
                   "device range of 256 bytes at offset 0 of chunk 0x");
  CompositeAddress not_device(host.data(), 16);
  DmaParams host_as_dev(host.data() + 64, 16, true, &not_device);
  CHECK_THROWS_MSG(stream->launchOperationH2D(&host_as_dev), "is not inside one live allocation");
  DmaParams wrong_direction(host.data(), 16, false, &address);
  CHECK_THROWS_MSG(stream->launchOperationH2D(&wrong_direction),
                   "DmaParams.to_device is false, expected true");

  flex::ComputeParams no_fn;
  no_fn.name = "matmul";
  CHECK_THROWS_MSG(stream->launchOperationCompute(&no_fn), "'matmul' has no function");
  flex::HostCallbackParams no_callback;
  CHECK_THROWS_MSG(stream->launchOperationHostCallback(&no_callback),
                   "'host_callback' has no function");
  CHECK_THROWS_MSG(stream->launchOperationDelay(std::chrono::nanoseconds(-5)),
                   "duration -5 ns is negative");
  flex::D2DParams copy;
  copy.src = CompositeAddress(dev, 128);
  copy.dst = CompositeAddress(dev, 128);
  copy.size = 129;
  CHECK_THROWS_MSG(stream->launchOperationD2D(&copy),
                   "launchOperationD2D (dst): offset 0 + size 129");

  context->deallocate(dev);
  DmaParams freed(host.data(), 16, true, &address);
  CHECK_THROWS_MSG(stream->launchOperationH2D(&freed), "is not inside one live allocation");
  CHECK_EQ(flex::test::launchedOps(stream), 0u);
}
