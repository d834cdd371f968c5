// The process's one context: creation, configuration from the environment, and
// the streams it owns.
#include <mutex>

#include "context_impl.hpp"
#include "env.hpp"
#include "lifecycle.hpp"
#include "stream_impl.hpp"
#include "thread_cpus.hpp"
#include "trace.hpp"

namespace flex {
namespace {

std::mutex g_create_mutex;
std::atomic<RuntimeContext*> g_context{nullptr};

constexpr int64_t kDefaultMemoryBytes = int64_t{16} << 30;
constexpr int64_t kUnlimitedEngines = INT64_MAX;  // FLEX_STUB_ENGINES unset

detail::SchedulerConfig schedulerConfigFromEnv() {
  detail::SchedulerConfig config;
  config.max_engines = static_cast<size_t>(
      detail::envInt("FLEX_STUB_ENGINES", kUnlimitedEngines, 1, INT64_MAX));
  // 1 GB/s is 1e9 bytes per second: one byte per nanosecond.
  config.dma_bytes_per_ns = detail::envPositiveDouble("FLEX_STUB_DMA_GBPS").value_or(0);
  const auto cores = static_cast<int64_t>(detail::ThreadCpus::ofCallingThread().count());
  config.dma_engines =
      static_cast<size_t>(detail::envInt("FLEX_STUB_DMA_ENGINES", cores, 1, 1024));
  config.fault_after = detail::envInt("FLEX_STUB_FAULT_AFTER", -1, 0, INT64_MAX);
  return config;
}

}  // namespace

std::mutex& detail::contextCreationMutex() { return g_create_mutex; }

RuntimeContext::Impl::Impl(int device_index, int card_index,
                           const detail::SchedulerConfig& scheduler_config, size_t memory_bytes,
                           std::string trace_file)
    : device(device_index),
      card(card_index),
      trace_path(std::move(trace_file)),
      scheduler(scheduler_config),
      memory(memory_bytes),
      card_clock(detail::cardTimingFromEnv()
                     ? std::make_unique<detail::CardClock>(detail::cardProfileFromEnv())
                     : nullptr) {}

RuntimeContext::RuntimeContext(int logical_device) {
  const detail::SchedulerConfig scheduler_config = schedulerConfigFromEnv();
  const auto memory_bytes = static_cast<size_t>(
      detail::envInt("FLEX_STUB_MEMORY_BYTES", kDefaultMemoryBytes, 0, INT64_MAX));
  std::string trace_path = detail::envValue("FLEX_STUB_TRACE").value_or("");
  impl_ = std::make_unique<Impl>(logical_device, getCardIndex(logical_device), scheduler_config,
                                 memory_bytes, std::move(trace_path));
  impl_->streams.emplace_back(new RuntimeStream(
      std::make_unique<RuntimeStream::Impl>(impl_.get(), 0, RuntimeStreamPriority::NORMAL)));
  impl_->default_stream = impl_->streams.back().get();
  if (!impl_->trace_path.empty()) detail::trace::start(impl_->card_clock ? 0 : detail::nowNs());
}

// Never runs: the context lives until the process ends (see create()).
RuntimeContext::~RuntimeContext() = default;

RuntimeContext* RuntimeContext::create(int logical_device) {
  detail::checkNotForkedChild();
  RuntimeContext* existing = g_context.load(std::memory_order_acquire);
  if (existing && existing->deviceIndex() == logical_device) return existing;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if ((existing = g_context.load(std::memory_order_acquire))) {
    if (existing->deviceIndex() == logical_device) return existing;
    throw Error("flex: this process already has a context for device " +
                std::to_string(existing->deviceIndex()) + "; cannot create one for device " +
                std::to_string(logical_device));
  }
  if (detail::g_shut_down.load(std::memory_order_relaxed)) detail::throwShutDown();
  const int devices = getNumDevices();
  if (logical_device < 0 || logical_device >= devices) {
    throw Error("flex: cannot create a context for device " + std::to_string(logical_device) +
                ": " + std::to_string(devices) + " device(s) visible, expected an index in [0, " +
                std::to_string(devices) + ")");
  }
  // Leaked on purpose: static destructors of other libraries may still free
  // device memory or query streams after ours ran.
  auto* context = new RuntimeContext(logical_device);
  g_context.store(context, std::memory_order_release);
  return context;
}

RuntimeContext* RuntimeContext::get() { return g_context.load(std::memory_order_acquire); }

int RuntimeContext::deviceIndex() const { return impl_->device; }
int RuntimeContext::cardIndex() const { return impl_->card; }

DeviceProperties RuntimeContext::properties() const {
  const detail::SchedulerConfig& config = impl_->scheduler.config();
  DeviceProperties properties;
  properties.name = "IBM Spyre (flex_stub emulation)";
  properties.card_index = impl_->card;
  properties.total_memory = impl_->memory.stats().total_bytes;
  properties.engines =
      config.max_engines == static_cast<size_t>(kUnlimitedEngines) ? 0 : config.max_engines;
  properties.dma_engines = config.dma_engines;
  return properties;
}

RuntimeStream* RuntimeContext::getDefaultStream() { return impl_->default_stream; }

RuntimeStream* RuntimeContext::createStream(RuntimeStreamPriority priority,
                                            RuntimeStreamMode /*mode: only STRICT_ORDERING*/,
                                            bool /*track_hazards: ordering is strict anyway*/) {
  detail::checkNotForkedChild();
  std::lock_guard<std::mutex> lock(impl_->streams_mutex);
  const uint64_t id = impl_->streams.size();
  impl_->streams.emplace_back(
      new RuntimeStream(std::make_unique<RuntimeStream::Impl>(impl_.get(), id, priority)));
  return impl_->streams.back().get();
}

bool RuntimeContext::hasStreamError() const {
  return impl_->failed_streams.load(std::memory_order_relaxed) > 0;
}

void* RuntimeContext::allocate(size_t nbytes) { return impl_->memory.allocate(nbytes); }
void RuntimeContext::deallocate(void* device_ptr) { impl_->memory.deallocate(device_ptr); }
bool RuntimeContext::isDevicePtr(const void* ptr) const { return impl_->memory.isDevicePtr(ptr); }
MemoryStats RuntimeContext::memoryStats() const { return impl_->memory.stats(); }

void* RuntimeContext::allocatePinned(size_t nbytes) { return impl_->memory.allocatePinned(nbytes); }
void RuntimeContext::deallocatePinned(void* host_ptr) { impl_->memory.deallocatePinned(host_ptr); }
bool RuntimeContext::isPinnedPtr(const void* ptr) const { return impl_->memory.isPinnedPtr(ptr); }

}  // namespace flex
