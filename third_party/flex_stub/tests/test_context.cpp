// Context ownership, stream creation, ids and configuration errors.
#include <atomic>
#include <type_traits>
#include <vector>

#include "util.hpp"

using flex::RuntimeContext;
using flex::RuntimeStream;
using flex::RuntimeStreamPriority;

// Ownership is enforced by the compiler: only the runtime creates or destroys
// a context or a stream.
static_assert(!std::is_destructible_v<RuntimeContext>, "callers must not delete a context");
static_assert(!std::is_destructible_v<RuntimeStream>, "callers must not delete a stream");
static_assert(!std::is_copy_constructible_v<RuntimeStream>, "streams are not copyable");

TEST(context_get_is_null_before_create) {
  CHECK(RuntimeContext::get() == nullptr);
  RuntimeContext* context = RuntimeContext::create(0);
  CHECK(context != nullptr);
  CHECK_EQ(RuntimeContext::get(), context);
}

TEST(context_create_same_device_returns_same_pointer) {
  util::setEnv("AIU_WORLD_SIZE", "2");
  RuntimeContext* first = RuntimeContext::create(1);
  CHECK_EQ(RuntimeContext::create(1), first);
  CHECK_EQ(first->deviceIndex(), 1);
  CHECK_EQ(first->cardIndex(), 1);
}

TEST(context_create_other_device_throws_naming_both) {
  util::setEnv("AIU_WORLD_SIZE", "2");
  RuntimeContext::create(0);
  CHECK_THROWS_MSG(RuntimeContext::create(1),
                   "context for device 0; cannot create one for device 1");
}

TEST(context_create_out_of_range_names_both_numbers) {
  util::setEnv("AIU_WORLD_SIZE", "2");
  CHECK_THROWS_MSG(RuntimeContext::create(5), "device 5: 2 device(s) visible");
  CHECK_THROWS_MSG(RuntimeContext::create(-1), "device -1: 2 device(s) visible");
  CHECK(RuntimeContext::get() == nullptr);
}

TEST(context_with_no_device_variable_any_of_the_eight_cards) {
  CHECK_THROWS_MSG(RuntimeContext::create(8), "device 8: 8 device(s) visible");
  RuntimeContext* context = RuntimeContext::create(7);
  CHECK_EQ(context->cardIndex(), 7);
}

TEST(context_card_index_follows_spyre_devices) {
  util::setEnv("SPYRE_DEVICES", "5,2");
  CHECK_EQ(RuntimeContext::create(1)->cardIndex(), 2);
}

TEST(context_properties_follow_the_environment) {
  util::setEnv("SPYRE_DEVICES", "3");
  util::setEnv("FLEX_STUB_MEMORY_BYTES", "4194304");
  util::setEnv("FLEX_STUB_ENGINES", "2");
  util::setEnv("FLEX_STUB_DMA_ENGINES", "3");
  const flex::DeviceProperties properties = RuntimeContext::create(0)->properties();
  CHECK_EQ(properties.name, std::string("IBM Spyre (flex_stub emulation)"));
  CHECK_EQ(properties.card_index, 3);
  CHECK_EQ(properties.total_memory, size_t{4194304});
  CHECK_EQ(properties.engines, size_t{2});
  CHECK_EQ(properties.dma_engines, size_t{3});
}

TEST(context_properties_report_unlimited_engines_as_zero) {
  CHECK_EQ(util::context()->properties().engines, size_t{0});
}

TEST(context_default_stream_is_stable_with_id_zero) {
  RuntimeContext* context = util::context();
  RuntimeStream* stream = context->getDefaultStream();
  CHECK(stream != nullptr);
  CHECK_EQ(context->getDefaultStream(), stream);
  CHECK_EQ(stream->streamId(), 0);
  CHECK(stream->priority() == RuntimeStreamPriority::NORMAL);
}

TEST(stream_ids_and_priorities_in_creation_order) {
  RuntimeContext* context = util::context();
  RuntimeStream* a = context->createStream(RuntimeStreamPriority::HIGH);
  RuntimeStream* b = context->createStream();
  RuntimeStream* c = context->createStream(RuntimeStreamPriority::NORMAL,
                                           flex::RuntimeStreamMode::STRICT_ORDERING, true);
  CHECK_EQ(a->streamId(), 1);
  CHECK_EQ(b->streamId(), 2);
  CHECK_EQ(c->streamId(), 3);
  CHECK(a->priority() == RuntimeStreamPriority::HIGH);
  CHECK(b->priority() == RuntimeStreamPriority::NORMAL);
  CHECK(a != b && b != c);
}

TEST(create_stream_is_cheap_and_starts_no_thread) {
  RuntimeContext* context = util::context();
  const int threads = util::baselineThreadCount();
  const auto start = util::Clock::now();
  for (int i = 0; i < 1000; ++i) context->createStream();
  const double per_stream_us = util::msSince(start) * 1e3 / 1000;
  CHECK_EQ(util::threadCount(), threads);
  CHECK(per_stream_us < 20);
}

TEST(context_creation_starts_no_thread) {
  const int threads = util::baselineThreadCount();
  util::context();
  CHECK_EQ(util::threadCount(), threads);
}

TEST(context_config_errors_name_variable_and_value) {
  util::setEnv("FLEX_STUB_ENGINES", "two");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_ENGINES='two' is not an integer");
  util::setEnv("FLEX_STUB_ENGINES", "0");
  CHECK_THROWS_MSG(RuntimeContext::create(0),
                   "FLEX_STUB_ENGINES='0' is out of range: it must be >= 1");
  util::setEnv("FLEX_STUB_ENGINES", "2");
  util::setEnv("FLEX_STUB_DMA_GBPS", "fast");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_DMA_GBPS='fast' is not a number");
  util::setEnv("FLEX_STUB_DMA_GBPS", "-1");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_DMA_GBPS='-1' is out of range");
  unsetenv("FLEX_STUB_DMA_GBPS");
  util::setEnv("FLEX_STUB_MEMORY_BYTES", "1G");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_MEMORY_BYTES='1G' is not an integer");
  unsetenv("FLEX_STUB_MEMORY_BYTES");
  util::setEnv("FLEX_STUB_FAULT_AFTER", "-3");
  CHECK_THROWS_MSG(RuntimeContext::create(0), "FLEX_STUB_FAULT_AFTER='-3' is out of range");
  unsetenv("FLEX_STUB_FAULT_AFTER");
  CHECK(RuntimeContext::get() == nullptr);
  CHECK(RuntimeContext::create(0) != nullptr);
}

TEST(context_create_concurrently_yields_one_context) {
  std::vector<std::thread> threads;
  std::vector<RuntimeContext*> seen(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&seen, i] { seen[i] = RuntimeContext::create(0); });
  }
  for (auto& thread : threads) thread.join();
  for (RuntimeContext* context : seen) CHECK_EQ(context, seen[0]);
}
