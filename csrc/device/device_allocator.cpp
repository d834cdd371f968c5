// The device allocator: the c10::DeviceAllocator registered for PrivateUse1,
// over the stream-aware block pools of device/caching_allocator.h.
#include "device/allocator.h"

#include <algorithm>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include "device/caching_allocator.h"
#include "device/card_rules.h"
#include "device/fork_gate.h"
#include "device/numerics.h"
#include "runtime/runtime.h"

namespace spyre {
namespace {

// Leaked on purpose: tensors may be freed by other static destructors.
DeviceCachingAllocator& cachingAllocator() {
  static auto* pools = new DeviceCachingAllocator();
  return *pools;
}

void freeDeviceBlock(void* context) {
  cachingAllocator().free(static_cast<DeviceBlock*>(context));
}

class SpyreDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    return spyre::allocate(nbytes, checkDevice(-1));
  }

  // copy_data is synchronous by contract: a D2D on the current stream, waited for.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    SpyreStream stream = getCurrentStream(-1);
    stream.checkCaptureAllowsHostWait("copy_data (a device copy the host waits for)");  // before it is queued
    stream.launchD2D(src, dest, count);
    stream.synchronizeSkippingCaptureCheck();
  }

  bool initialized() override {
    return true;
  }

  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    cachingAllocator().emptyCache();
  }

  void recordStream(const c10::DataPtr& data_ptr, c10::Stream stream) override {
    spyre::recordStream(data_ptr, SpyreStream(stream));
  }

  // The stats are those of the device this process is bound to; asking for
  // another device raises (ensureDevice names both).
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    ensureDevice(device);
    return cachingAllocator().stats();
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    ensureDevice(device);
    cachingAllocator().resetAccumulatedStats();
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    ensureDevice(device);
    cachingAllocator().resetPeakStats();
  }

  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    ensureDevice(device);
    const flex::MemoryStats stats = runtimeContext()->memoryStats();
    return {stats.total_bytes - stats.allocated_bytes, stats.total_bytes};
  }
};

SpyreDeviceAllocator& theDeviceAllocator() {
  static auto* allocator = new SpyreDeviceAllocator();
  return *allocator;
}

// Registered when _C is loaded.
const bool registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, &theDeviceAllocator());
  return true;
}();

}  // namespace

void fork_gate::lockDeviceAllocator() {
  cachingAllocator().lockForFork();
}

void fork_gate::unlockDeviceAllocator() {
  cachingAllocator().unlockAfterFork();
}

c10::Allocator* deviceAllocator() {
  return &theDeviceAllocator();
}

c10::DataPtr allocate(size_t nbytes, CheckedDevice device) {
  const c10::Device where(c10::DeviceType::PrivateUse1, device.index());
  if (nbytes == 0) {
    return {nullptr, nullptr, nullptr, where};  // as CUDA: no memory, no stats
  }
  runtimeContext();  // raises after free_runtime(), even when the cache could serve
  resolveNumerics();  // known before anything is written to device memory
  // Under the card's rules the card's unit: whole 128-byte sticks.
  DeviceBlock* block = cachingAllocator().malloc(deviceAllocationBytes(nbytes), device.index());
  return {block->ptr, block, &freeDeviceBlock, where};
}

void useGraphPool(std::pair<uint64_t, uint64_t> id) {
  cachingAllocator().usePool(id);
}

void releaseGraphPool(std::pair<uint64_t, uint64_t> id) {
  cachingAllocator().releasePool(id);
}

void recordMemoryHistory(const HistorySettings& settings) {
  cachingAllocator().recordHistory(settings);
}

MemorySnapshot memorySnapshot() {
  return cachingAllocator().snapshot();
}

bool allocatedInGraphPool(const c10::DataPtr& data_ptr, std::pair<uint64_t, uint64_t> id) {
  if (data_ptr.get_deleter() != &freeDeviceBlock) return false;
  return cachingAllocator().isInPool(static_cast<const DeviceBlock*>(data_ptr.get_context()), id);
}

void recordStream(const c10::DataPtr& data_ptr, const SpyreStream& stream) {
  if (data_ptr.get_deleter() != &freeDeviceBlock) {
    return;
  }
  auto* block = static_cast<DeviceBlock*>(data_ptr.get_context());
  // An allocated block's stream never changes, and its recorded streams stay
  // recorded until it is freed: work on the allocation stream, or on a stream
  // already recorded, needs no lock (the common cases).
  if (block->stream == stream.id() || block->recordedOn(stream.id())) {
    return;
  }
  cachingAllocator().recordStream(block, stream.id());
}

void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes) {
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  // Allocated before anything changes: an out-of-memory error leaves the storage as it was.
  c10::DataPtr new_data = storage.allocator()->allocate(new_bytes);
  const size_t copy_bytes = std::min(storage.nbytes(), new_bytes);
  if (copy_bytes > 0 && storage.data() != nullptr) {
    const SpyreStream stream = getCurrentStream(storage.device().index());
    stream.launchD2D(storage.data(), new_data.get(), copy_bytes);
    recordStream(storage.data_ptr(), stream);  // the old block outlives the copy
  }
  const_cast<c10::Storage&>(storage).set_data_ptr_noswap(std::move(new_data));
  const_cast<c10::Storage&>(storage).set_nbytes(new_bytes);
}

int64_t blockObjectsMade() { return cachingAllocator().blockObjectsMade(); }

c10::Device deviceFromPtr(void* ptr) {
  flex::RuntimeContext* context = flex::RuntimeContext::get();
  TORCH_CHECK(context != nullptr && context->isDevicePtr(ptr), "pointer ", ptr,
              " is not Spyre device memory");
  return c10::Device(c10::DeviceType::PrivateUse1,
                     static_cast<c10::DeviceIndex>(context->deviceIndex()));
}

}  // namespace spyre
