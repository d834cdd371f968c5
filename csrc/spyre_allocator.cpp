#include "spyre_allocator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>

#include "spyre_runtime.h"

namespace spyre {
namespace {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

// CUDA's boundary between its small and large pools; the stats report each
// block in the aggregate and in the pool its size would use there.
constexpr size_t kSmallBlockBytes = 1 << 20;

// One device allocation and the streams that may still use it.
struct Block {
  void* ptr;
  size_t size;
  c10::DeviceIndex device;
  c10::StreamId allocation_stream;
  std::vector<c10::StreamId> recorded_streams;  // guarded by the allocator mutex
  uint64_t free_ticket = 0;                     // set when the host frees it
};

void increase(StatArray& stats, size_t block_size, size_t amount) {
  const auto pool = block_size <= kSmallBlockBytes ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  stats[static_cast<size_t>(StatType::AGGREGATE)].increase(amount);
  stats[static_cast<size_t>(pool)].increase(amount);
}
void decrease(StatArray& stats, size_t block_size, size_t amount) {
  const auto pool = block_size <= kSmallBlockBytes ? StatType::SMALL_POOL : StatType::LARGE_POOL;
  stats[static_cast<size_t>(StatType::AGGREGATE)].decrease(amount);
  stats[static_cast<size_t>(pool)].decrease(amount);
}

class SpyreDeviceAllocator;
SpyreDeviceAllocator& theDeviceAllocator();

class SpyreDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = ensureDevice(-1);
    if (nbytes == 0) {
      // As CUDA: no memory, no stats, nothing to free.
      return {nullptr, nullptr, nullptr, c10::Device(c10::DeviceType::PrivateUse1, device)};
    }
    void* ptr = nullptr;
    try {
      ptr = runtimeContext()->allocate(nbytes);
    } catch (const flex::OutOfMemoryError& first_failure) {
      // Blocks freed on the host may still be waiting for stream work: wait
      // for those (as CUDA's allocator does before giving up) and try again.
      if (!waitForPendingFrees()) {
        throwOutOfMemory(device, nbytes, first_failure);
      }
      parkIfExiting();  // woken because the process exits: do not return
      try {
        ptr = runtimeContext()->allocate(nbytes);
      } catch (const flex::OutOfMemoryError& second_failure) {
        throwOutOfMemory(device, nbytes, second_failure);
      }
    }
    auto* block = new Block{ptr, nbytes, device, getCurrentStream(device).id(), {}};
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Nothing is cached: every allocation is its own segment.
      increase(stats_.allocation, nbytes, 1);
      increase(stats_.segment, nbytes, 1);
      increase(stats_.active, nbytes, 1);
      increase(stats_.allocated_bytes, nbytes, nbytes);
      increase(stats_.reserved_bytes, nbytes, nbytes);
      increase(stats_.active_bytes, nbytes, nbytes);
      increase(stats_.requested_bytes, nbytes, nbytes);
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

  // The stats are those of the device this process is bound to; asking for
  // another device raises (ensureDevice names both).
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    ensureDevice(device);
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    ensureDevice(device);
    std::lock_guard<std::mutex> lock(mutex_);
    forEachStatArray([](StatArray& stats) {
      for (Stat& stat : stats) stat.reset_accumulated();
    });
    stats_.num_alloc_retries = 0;
    stats_.num_ooms = 0;
    stats_.num_device_alloc = 0;
    stats_.num_device_free = 0;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    ensureDevice(device);
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

  [[noreturn]] void throwOutOfMemory(c10::DeviceIndex device, size_t nbytes,
                                     const flex::OutOfMemoryError& error) {
    int64_t allocated = 0;
    int64_t reserved = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.num_ooms;
      allocated = stats_.allocated_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
      reserved = stats_.reserved_bytes[static_cast<size_t>(StatType::AGGREGATE)].current;
    }
    const flex::MemoryStats device_stats = runtimeContext()->memoryStats();
    TORCH_CHECK_WITH(OutOfMemoryError, false, "Spyre out of memory on spyre:",
                     static_cast<int>(device), ": tried to allocate ", nbytes,
                     " bytes; the device has ", device_stats.total_bytes, " bytes in total, ",
                     device_stats.total_bytes - device_stats.allocated_bytes,
                     " free; PyTorch holds ", allocated, " bytes in tensors and ", reserved,
                     " bytes reserved (tensors plus freed blocks streams still use). Runtime: ",
                     error.what());
  }

  // Waits until every block the host freed before the call has been returned
  // to the runtime. False (at once) if none was pending.
  bool waitForPendingFrees() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (pending_frees_.empty()) {
      return false;
    }
    const uint64_t freed_before = next_free_ticket_;
    frees_done_.wait(lock, [&] {
      return pending_frees_.empty() || *pending_frees_.begin() >= freed_before;
    });
    ++stats_.num_alloc_retries;
    return true;
  }

  // The host let go of the block: it no longer counts as allocated. It stays
  // active and reserved until every stream that used it is done with it.
  std::vector<c10::StreamId> releaseFromHost(Block* block) {
    std::lock_guard<std::mutex> lock(mutex_);
    decrease(stats_.allocation, block->size, 1);
    decrease(stats_.allocated_bytes, block->size, block->size);
    decrease(stats_.requested_bytes, block->size, block->size);
    block->free_ticket = next_free_ticket_++;
    pending_frees_.insert(block->free_ticket);
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
      decrease(stats_.active, block->size, 1);
      decrease(stats_.active_bytes, block->size, block->size);
      decrease(stats_.segment, block->size, 1);
      decrease(stats_.reserved_bytes, block->size, block->size);
      ++stats_.num_device_free;
      pending_frees_.erase(block->free_ticket);
    }
    frees_done_.notify_all();
    delete block;
  }

  // Hands the block back to the runtime when destroyed: shared by the host
  // and by a marker on each stream that still has work queued.
  struct PendingFree {
    explicit PendingFree(Block* freed) : block(freed) {}
    PendingFree(const PendingFree&) = delete;
    PendingFree& operator=(const PendingFree&) = delete;
    ~PendingFree() { theDeviceAllocator().returnToRuntime(block); }
    Block* block;
  };

  std::mutex mutex_;
  DeviceStats stats_;
  // Tickets of blocks freed by the host and not yet returned, in free order.
  std::set<uint64_t> pending_frees_;
  uint64_t next_free_ticket_ = 0;
  std::condition_variable frees_done_;
};

// Leaked on purpose: tensors may be freed by other static destructors.
SpyreDeviceAllocator& theDeviceAllocator() {
  static auto* allocator = new SpyreDeviceAllocator();
  return *allocator;
}

void SpyreDeviceAllocator::deleteBlock(void* context) {
  auto* block = static_cast<Block*>(context);
  const std::vector<c10::StreamId> streams = theDeviceAllocator().releaseFromHost(block);
  auto pending = std::make_shared<PendingFree>(block);
  for (c10::StreamId id : streams) {
    try {
      const SpyreStream stream(c10::Stream(
          c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, block->device), id));
      flex::RuntimeStream* handle = stream.resolveRuntimeHandle();
      if (handle->launchedOps() == handle->completedOps()) {
        continue;  // idle: nothing launched so far can still touch the block
      }
      // The marker holds a reference until the stream destroys it: after it
      // ran in stream order, or when a failed stream discards its queue (that
      // work will never touch the block).
      stream.launchHostCallback([pending] {}, "free");
    } catch (...) {
      // Failed stream or runtime shut down: its work is gone.
    }
  }
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
