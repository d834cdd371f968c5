#include "spyre_allocator.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include "spyre_runtime.h"

namespace spyre {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingDeviceAllocator::DeviceStats;

// One device allocation and the streams that may still use it.
struct Block {
  void* ptr;
  size_t size;
  c10::DeviceIndex device;
  c10::StreamId allocation_stream;
  std::vector<c10::StreamId> recorded_streams;  // guarded by the allocator mutex
};

void increase(StatArray& stats, size_t amount) {
  for (Stat& stat : stats) stat.increase(amount);
}
void decrease(StatArray& stats, size_t amount) {
  for (Stat& stat : stats) stat.decrease(amount);
}

class SpyreDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = ensureDevice(-1);
    void* ptr = nullptr;
    try {
      ptr = runtimeContext()->allocate(nbytes);
    } catch (const flex::OutOfMemoryError& e) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.num_ooms;
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, "Spyre out of memory on spyre:",
                       static_cast<int>(device), ": tried to allocate ", nbytes, " bytes (",
                       e.what(), ")");
    }
    auto* block = new Block{ptr, nbytes, device, getCurrentStream(device).id(), {}};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Nothing is cached: every allocation is its own segment.
      increase(stats_.allocation, 1);
      increase(stats_.segment, 1);
      increase(stats_.active, 1);
      increase(stats_.allocated_bytes, nbytes);
      increase(stats_.reserved_bytes, nbytes);
      increase(stats_.active_bytes, nbytes);
      increase(stats_.requested_bytes, nbytes);
      ++stats_.num_device_alloc;
    }
    return {ptr, block, &deleteBlock, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }

  // copy_data is synchronous by contract: a D2D on the current stream, waited for.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    SpyreStream stream = getCurrentStream(-1);
    stream.launchD2D(src, dest, count);
    stream.synchronize();
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    // Nothing is cached: freed blocks go back to the runtime.
  }

  void recordStream(const c10::DataPtr& data_ptr, c10::Stream stream) override {
    spyre::recordStream(data_ptr, SpyreStream(stream));
  }

  DeviceStats getDeviceStats(c10::DeviceIndex /*device*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void resetAccumulatedStats(c10::DeviceIndex /*device*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    forEachStatArray([](StatArray& stats) {
      for (Stat& stat : stats) stat.reset_accumulated();
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex /*device*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    forEachStatArray([](StatArray& stats) {
      for (Stat& stat : stats) stat.reset_peak();
    });
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    ensureDevice(device);
    const flex::MemoryStats stats = runtimeContext()->memoryStats();
    return {stats.total_bytes - stats.allocated_bytes, stats.total_bytes};
  }

  void record(Block* block, c10::StreamId stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& recorded = block->recorded_streams;
    if (stream != block->allocation_stream &&
        std::find(recorded.begin(), recorded.end(), stream) == recorded.end()) {
      recorded.push_back(stream);
    }
  }

  static void deleteBlock(void* context);

 private:
  template <typename F>
  void forEachStatArray(F f) {
    for (StatArray* stats : {&stats_.allocation, &stats_.segment, &stats_.active,
                             &stats_.allocated_bytes, &stats_.reserved_bytes,
                             &stats_.active_bytes, &stats_.requested_bytes}) {
      f(*stats);
    }
  }

  // The host let go of the block: it no longer counts as allocated.
  std::vector<c10::StreamId> releaseFromHost(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    decrease(stats_.allocation, 1);
    decrease(stats_.active, 1);
    decrease(stats_.allocated_bytes, block->size);
    decrease(stats_.active_bytes, block->size);
    decrease(stats_.requested_bytes, block->size);
    std::vector<c10::StreamId> streams = std::move(block->recorded_streams);
    streams.push_back(block->allocation_stream);
    return streams;
  }

  // Every stream that used the block has passed the free point.
  void returnToRuntime(Block* block) noexcept {
    try {
      if (flex::RuntimeContext* context = flex::RuntimeContext::get()) {
        context->deallocate(block->ptr);
      }
    } catch (...) {
      // A forked child or a torn-down runtime: the memory goes with the process.
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      decrease(stats_.segment, 1);
      decrease(stats_.reserved_bytes, block->size);
      ++stats_.num_device_free;
    }
    delete block;
  }

  std::mutex mutex_;
  DeviceStats stats_;
};

// Leaked on purpose: tensors may be freed by other static destructors.
SpyreDeviceAllocator& theDeviceAllocator() {
  static auto* allocator = new SpyreDeviceAllocator();
  return *allocator;
}

void SpyreDeviceAllocator::deleteBlock(void* context) {
  auto* block = static_cast<Block*>(context);
  SpyreDeviceAllocator& self = theDeviceAllocator();
  const std::vector<c10::StreamId> streams = self.releaseFromHost(block);
  // One reference for this function, one per stream that still has work: the
  // last to let go returns the block.
  auto pending = std::make_shared<std::atomic<int>>(1);
  auto release = [pending, block] {
    if (pending->fetch_sub(1) == 1) {
      theDeviceAllocator().returnToRuntime(block);
    }
  };
  for (c10::StreamId id : streams) {
    try {
      const SpyreStream stream(c10::Stream(
          c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, block->device), id));
      flex::RuntimeStream* handle = stream.resolveRuntimeHandle();
      if (handle->launchedOps() == handle->completedOps()) {
        continue;  // idle: nothing launched so far can still touch the block
      }
      pending->fetch_add(1);
      try {
        stream.launchHostCallback(release, "free");
      } catch (...) {
        pending->fetch_sub(1);  // stream failed or runtime shut down: its work is gone
      }
    } catch (...) {
    }
  }
  release();
}

class SpyreHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes == 0 ? nullptr : runtimeContext()->allocatePinned(nbytes);
    return {ptr, ptr, &deletePinned, c10::Device(c10::DeviceType::CPU)};
  }

  static void deletePinned(void* ptr) {
    if (ptr == nullptr) {
      return;
    }
    try {
      if (flex::RuntimeContext* context = flex::RuntimeContext::get()) {
        context->deallocatePinned(ptr);
      }
    } catch (...) {
    }
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Pinned blocks are not cached, and copies keep their host buffer alive until
  // the copy has run, so a freed block can never be reused too early.
  bool record_event(void* /*ptr*/, void* /*ctx*/, c10::Stream /*stream*/) override {
    return true;
  }
  void empty_cache() override {}
  at::HostStats get_stats() override {
    return {};
  }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

SpyreHostAllocator& theHostAllocator() {
  static auto* allocator = new SpyreHostAllocator();
  return *allocator;
}

// Registered when _C is loaded. Without a host allocator,
// torch.accelerator.empty_host_cache() dereferences null on torch 2.13.
const bool registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &theDeviceAllocator());
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &theHostAllocator());
  return true;
}();

}  // namespace

c10::Allocator* deviceAllocator() {
  return &theDeviceAllocator();
}

void recordStream(const c10::DataPtr& data_ptr, const SpyreStream& stream) {
  if (data_ptr.get_deleter() != &SpyreDeviceAllocator::deleteBlock) {
    return;
  }
  theDeviceAllocator().record(static_cast<Block*>(data_ptr.get_context()), stream.id());
}

c10::Allocator* pinnedHostAllocator() {
  return &theHostAllocator();
}

bool isPinnedPtr(const void* ptr) {
  flex::RuntimeContext* context = flex::RuntimeContext::get();
  return context != nullptr && context->isPinnedPtr(ptr);
}

c10::Device deviceFromPtr(void* ptr) {
  flex::RuntimeContext* context = flex::RuntimeContext::get();
  TORCH_CHECK(context != nullptr && context->isDevicePtr(ptr), "pointer ", ptr,
              " is not Spyre device memory");
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(context->deviceIndex()));
}

}  // namespace spyre
