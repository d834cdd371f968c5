#include "device/caching_allocator.h"

#include <algorithm>
#include <cstdint>
#include <functional>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <flex/card.hpp>

#include "runtime/capture.h"
#include "runtime/host_wait.h"
#include "runtime/runtime.h"
#include "runtime/sanitizer.h"

namespace spyre {

using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatArray;
using c10::CachingAllocator::StatType;

namespace {

constexpr size_t kMinBlockSize = 512;             // every request is rounded up to this
constexpr size_t kSmallSize = size_t{1} << 20;    // largest request of the small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;  // small pool segments
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // below this, large segments are 20 MiB
constexpr size_t kLargeBuffer = size_t{20} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;  // larger segments round up to this
// Past this a request cannot be rounded without overflowing size_t.
constexpr size_t kLargestRequest = SIZE_MAX / 2;

size_t roundSize(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize
                                : kMinBlockSize * ((nbytes + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segmentSize(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

// Adds `delta` to the aggregate stat and to the block's pool stat.
void updateStat(StatArray& stats, bool small, int64_t delta) {
  for (const StatType type : {StatType::AGGREGATE, small ? StatType::SMALL_POOL
                                                         : StatType::LARGE_POOL}) {
    Stat& stat = stats[static_cast<size_t>(type)];
    if (delta >= 0) {
      stat.increase(static_cast<size_t>(delta));
    } else {
      stat.decrease(static_cast<size_t>(-delta));
    }
  }
}

template <typename F>
void forEachStatArray(c10::CachingDeviceAllocator::DeviceStats& stats, F f) {
  for (StatArray* array :
       {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
        &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
        &stats.inactive_split_bytes, &stats.requested_bytes}) {
    for (Stat& stat : *array) f(stat);
  }
}

// A new block out of its pool, with its pool node: may throw, nothing leaks.
DeviceBlock* newBlock(char* ptr, size_t size, c10::StreamId stream, c10::DeviceIndex device,
                      bool small) {
  auto block = std::make_unique<DeviceBlock>(DeviceBlock{ptr, size, stream, device, small});
  BlockSet scratch;
  scratch.insert(block.get());
  block->pool_node = scratch.extract(scratch.begin());
  return block.release();
}

}  // namespace

bool BlockBySize::operator()(const DeviceBlock* a, const DeviceBlock* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

flex::RuntimeStream* DeviceCachingAllocator::handleLocked(c10::StreamId stream,
                                                          c10::DeviceIndex device) {
  TORCH_CHECK(stream >= 0 && stream < kMaxStreamIds, "spyre allocator: stream id ", stream,
              " is not a stream id with a handle (0-", kMaxStreamIds - 1, ")");
  flex::RuntimeStream*& handle = handles_[static_cast<size_t>(stream)];
  if (handle == nullptr) {
    handle = SpyreStream(c10::Stream(c10::Stream::UNSAFE,
                                     c10::Device(c10::DeviceType::PrivateUse1, device), stream))
                 .resolveRuntimeHandle();
  }
  return handle;
}

DeviceBlock* DeviceCachingAllocator::malloc(size_t nbytes, c10::DeviceIndex device) {
  const c10::StreamId stream = getCurrentStream(device).id();
  if (DeviceBlock* block = takeReusableFree(nbytes, stream, device)) return block;
  Context context = history_.gather(RecordContext::STATE);  // before the lock: may take the GIL
  std::unique_lock<std::mutex> lock = lockAndDrain();
  // The stream's capture pool, read under this lock: a graph releases its
  // pool (releasePool, under this lock) only after its capture has ended, so
  // a pool read here is held until the lock is released. Read again after the
  // lock was released (the retry below): the capture may have ended since.
  PoolId capture_pool;
  PrivatePool* owner = nullptr;
  const size_t size = roundSize(nbytes);
  auto choosePoolLocked = [&]() -> Pool& {
    capture_pool = capture::poolOf(stream);  // {0, 0} unless the stream captures
    owner = nullptr;
    if (capture_pool != PoolId{0, 0}) {
      const auto it = private_pools_.find(capture_pool);
      TORCH_INTERNAL_ASSERT(it != private_pools_.end(), "a capture's pool is not held");
      owner = it->second.get();
    }
    return owner != nullptr ? (size <= kSmallSize ? owner->small : owner->large)
                            : (size <= kSmallSize ? small_pool_ : large_pool_);
  };
  Pool* pool = &choosePoolLocked();
  if (nbytes > kLargestRequest) {
    throwOutOfMemory(lock, device, nbytes, 0, "the request is larger than any segment", stream,
                     nbytes, capture_pool, context);
  }
  const size_t segment_bytes = segmentSize(size);
  handleLocked(stream, device);  // free() reads it and must not resolve
  retryDeferredLocked();
  processEventsLocked();
  std::string runtime_message;
  DeviceBlock* block = takeFreeBlockLocked(*pool, stream, size);
  if (block == nullptr) {
    block = allocateSegmentLocked(*pool, owner, stream, device, segment_bytes, runtime_message,
                                  context);
  }
  if (block == nullptr) {
    // As CUDA: give every cached block back (after waiting for pending frees)
    // and try once more.
    lock.unlock();
    releaseCachedBlocks(context);
    lock.lock();
    drainUnlockedFreesLocked();
    ++stats_.num_alloc_retries;
    pool = &choosePoolLocked();  // an unused private pool may be gone now
    block = takeFreeBlockLocked(*pool, stream, size);
    if (block == nullptr) {
      block = allocateSegmentLocked(*pool, owner, stream, device, segment_bytes, runtime_message,
                                    context);
    }
    if (block == nullptr) {
      throwOutOfMemory(lock, device, nbytes, segment_bytes, runtime_message.c_str(), stream, size,
                       capture_pool, context);
    }
  }
  block = splitAndActivateLocked(block, size, nbytes);
  if (C10_UNLIKELY(history_.recordingLocked() || context != nullptr)) {
    block->context = std::move(context);
    history_.recordLocked(HistoryAction::ALLOC, device, reinterpret_cast<uintptr_t>(block->ptr),
                          nbytes, stream, capture_pool, block->context);
  }
  const ProfilerReport report = profilerReportLocked(block, static_cast<int64_t>(block->size));
  lock.unlock();
  reportToProfiler(report);
  return block;
}

DeviceBlock* DeviceCachingAllocator::takeFreeBlockLocked(Pool& pool, c10::StreamId stream,
                                                         size_t size) {
  DeviceBlock key{nullptr, size, stream, 0, pool.is_small};
  const auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  DeviceBlock* block = *it;
  block->pool_node = pool.blocks.extract(it);
  return block;
}

DeviceBlock* DeviceCachingAllocator::allocateSegmentLocked(Pool& pool, PrivatePool* owner,
                                                           c10::StreamId stream,
                                                           c10::DeviceIndex device,
                                                           size_t segment_bytes,
                                                           std::string& runtime_message,
                                                           const Context& context) {
  std::unique_ptr<DeviceBlock> block(
      newBlock(nullptr, segment_bytes, stream, device, pool.is_small));  // before the memory
  ++block_objects_made_;
  auto segment = std::make_unique<DeviceSegment>(DeviceSegment{block.get(), context});
  block->private_pool = owner;
  try {
    block->ptr = static_cast<char*>(runtimeContext()->allocate(segment_bytes));
  } catch (const flex::OutOfMemoryError& error) {
    runtime_message = error.what();
    return nullptr;
  }
  if (owner != nullptr) ++owner->segments;
  block->segment = segment.release();
  linkSegmentLocked(block->segment);
  history_.recordLocked(HistoryAction::SEGMENT_ALLOC, device,
                        reinterpret_cast<uintptr_t>(block->ptr), segment_bytes, stream,
                        poolIdOf(block.get()), context);
  updateStat(stats_.segment, pool.is_small, 1);
  updateStat(stats_.reserved_bytes, pool.is_small, static_cast<int64_t>(segment_bytes));
  ++stats_.num_device_alloc;
  return block.release();
}

DeviceBlock* DeviceCachingAllocator::splitAndActivateLocked(DeviceBlock* block, size_t size,
                                                            size_t requested) {
  Pool& pool = poolOf(block);
  const bool already_split = block->isSplit();
  const size_t rest = block->size - size;
  // Keep the rest only when it can serve a request of the same pool.
  if (block->small ? rest >= kMinBlockSize : rest > kSmallSize) {
    DeviceBlock* remaining = block;
    block = blockObjectLocked(remaining->ptr, size, remaining->stream, remaining->device,
                              remaining->small);
    block->private_pool = remaining->private_pool;
    block->segment = remaining->segment;
    block->prev = remaining->prev;
    if (block->prev != nullptr) {
      block->prev->next = block;
    } else {
      block->segment->head = block;
    }
    block->next = remaining;
    remaining->prev = block;
    remaining->ptr += size;
    remaining->size = rest;
    pool.blocks.insert(std::move(remaining->pool_node));
    if (already_split) {
      updateStat(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(size));
    } else {
      updateStat(stats_.inactive_split, block->small, 1);
      updateStat(stats_.inactive_split_bytes, block->small, static_cast<int64_t>(rest));
    }
  } else if (already_split) {
    updateStat(stats_.inactive_split, block->small, -1);
    updateStat(stats_.inactive_split_bytes, block->small, -static_cast<int64_t>(block->size));
  }
  block->allocated = true;
  std::atomic_ref<bool>(block->used_elsewhere).store(false, std::memory_order_relaxed);
  for (uint64_t& bits : block->recorded_bits) {
    std::atomic_ref<uint64_t>(bits).store(0, std::memory_order_relaxed);
  }
  block->requested_size = requested;
  updateStat(stats_.allocation, block->small, 1);
  updateStat(stats_.allocated_bytes, block->small, static_cast<int64_t>(block->size));
  updateStat(stats_.active, block->small, 1);
  updateStat(stats_.active_bytes, block->small, static_cast<int64_t>(block->size));
  updateStat(stats_.requested_bytes, block->small, static_cast<int64_t>(requested));
  return block;
}

void DeviceCachingAllocator::free(DeviceBlock* block) noexcept {
  // Nothing watches this free as it happens: the next call that takes the
  // lock releases the block (drainUnlockedFreesLocked), as if this one had.
  if (C10_LIKELY(!std::atomic_ref<bool>(block->used_elsewhere).load(std::memory_order_relaxed) &&
                 !history_on_.load(std::memory_order_relaxed) &&
                 !c10::memoryProfilingEnabled())) {
    if (block->private_pool == nullptr) {
      block = reusable_free_.exchange(block, std::memory_order_acq_rel);
      if (block == nullptr) return;
    }
    pushUnlockedFree(block);
    return;
  }
  // Before the lock: may take the GIL. Null on an engine thread (no Python
  // there): the trace then shows the allocation's context, as CUDA's.
  const Context context = history_.gather(RecordContext::ALL);
  std::unique_lock<std::mutex> lock = lockAndDrain();
  ProfilerReport report{};
  releaseLocked(block, context, &report);
  lock.unlock();
  reportToProfiler(report);
}

void DeviceCachingAllocator::releaseLocked(DeviceBlock* block, const Context& context,
                                           ProfilerReport* report) noexcept {
  if (C10_UNLIKELY(history_.recordingLocked())) {
    history_.recordLocked(HistoryAction::FREE_REQUESTED, block->device,
                          reinterpret_cast<uintptr_t>(block->ptr), block->requested_size,
                          block->stream, poolIdOf(block), context ? context : block->context);
  }
  block->allocated = false;
  updateStat(stats_.allocation, block->small, -1);
  updateStat(stats_.allocated_bytes, block->small, -static_cast<int64_t>(block->size));
  // Before the block can merge away: the report names it.
  if (report != nullptr) *report = profilerReportLocked(block, -static_cast<int64_t>(block->size));
  try {
    insertEventsLocked(block);
  } catch (...) {
    // No memory for an event: the block may still be in use on another
    // stream, so it must not return to its pool yet.
    block->deferred = true;
    block->next_deferred = deferred_;
    deferred_ = block;
    noteWaitingBlocksLocked();
  }
  if (!block->deferred && block->event_count == 0) freeBlockLocked(block, context);
}

void DeviceCachingAllocator::pushUnlockedFree(DeviceBlock* block) noexcept {
  DeviceBlock* head = unlocked_frees_.load(std::memory_order_relaxed);
  do {
    block->next_unlocked_free = head;
  } while (!unlocked_frees_.compare_exchange_weak(head, block, std::memory_order_release,
                                                  std::memory_order_relaxed));
}

DeviceBlock* DeviceCachingAllocator::takeReusableFree(size_t nbytes, c10::StreamId stream,
                                                      c10::DeviceIndex device) {
  if (reusable_free_.load(std::memory_order_relaxed) == nullptr ||
      waiting_blocks_.load(std::memory_order_relaxed) ||
      history_on_.load(std::memory_order_relaxed) || c10::memoryProfilingEnabled() ||
      capture::anyCapture()) {
    return nullptr;
  }
  DeviceBlock* block = reusable_free_.exchange(nullptr, std::memory_order_acquire);
  if (block == nullptr) return nullptr;
  if (block->stream != stream || block->device != device || block->requested_size != nbytes) {
    pushUnlockedFree(block);  // an ordinary unlocked free: the lock takes it
    return nullptr;
  }
  // Handed out again: as splitAndActivateLocked leaves a block (used_elsewhere
  // is false: the unlocked free requires it).
  for (uint64_t& bits : block->recorded_bits) {
    std::atomic_ref<uint64_t>(bits).store(0, std::memory_order_relaxed);
  }
  UnlockedReuses& reuses = unlocked_reuses_[block->small ? 0 : 1];
  reuses.count.fetch_add(1, std::memory_order_relaxed);
  reuses.bytes.fetch_add(static_cast<int64_t>(block->size), std::memory_order_relaxed);
  reuses.requested.fetch_add(static_cast<int64_t>(nbytes), std::memory_order_relaxed);
  return block;
}

void DeviceCachingAllocator::foldUnlockedReusesLocked() noexcept {
  for (const bool small : {true, false}) {
    UnlockedReuses& reuses = unlocked_reuses_[small ? 0 : 1];
    if (reuses.count.load(std::memory_order_relaxed) == 0) continue;
    // A free and an allocation of the same block: counted, current unchanged.
    const auto count = static_cast<size_t>(reuses.count.exchange(0, std::memory_order_relaxed));
    const auto bytes = static_cast<size_t>(reuses.bytes.exchange(0, std::memory_order_relaxed));
    const auto requested =
        static_cast<size_t>(reuses.requested.exchange(0, std::memory_order_relaxed));
    for (const StatType type :
         {StatType::AGGREGATE, small ? StatType::SMALL_POOL : StatType::LARGE_POOL}) {
      const auto index = static_cast<size_t>(type);
      for (const auto& [array, amount] :
           {std::pair{&stats_.allocation, count}, std::pair{&stats_.active, count},
            std::pair{&stats_.allocated_bytes, bytes}, std::pair{&stats_.active_bytes, bytes},
            std::pair{&stats_.requested_bytes, requested}}) {
        (*array)[index].allocated += static_cast<int64_t>(amount);
        (*array)[index].freed += static_cast<int64_t>(amount);
      }
    }
  }
}

void DeviceCachingAllocator::drainUnlockedFreesLocked() noexcept {
  foldUnlockedReusesLocked();
  if (reusable_free_.load(std::memory_order_relaxed) != nullptr) {
    if (DeviceBlock* block = reusable_free_.exchange(nullptr, std::memory_order_acquire)) {
      releaseLocked(block, nullptr);
    }
  }
  if (unlocked_frees_.load(std::memory_order_relaxed) == nullptr) return;
  DeviceBlock* block = unlocked_frees_.exchange(nullptr, std::memory_order_acquire);
  // Most recent first: the pools, merges and stats end the same in any order.
  while (block != nullptr) {
    DeviceBlock* next = block->next_unlocked_free;
    block->next_unlocked_free = nullptr;
    releaseLocked(block, nullptr);
    block = next;
  }
}

std::unique_lock<std::mutex> DeviceCachingAllocator::lockAndDrain() {
  std::unique_lock<std::mutex> lock(mutex_);
  drainUnlockedFreesLocked();
  return lock;
}

void DeviceCachingAllocator::retryDeferredLocked() {
  while (deferred_ != nullptr) {
    DeviceBlock* block = deferred_;
    insertEventsLocked(block);  // throws again while memory is short: stays deferred
    deferred_ = block->next_deferred;
    block->next_deferred = nullptr;
    block->deferred = false;
    if (block->event_count == 0) freeBlockLocked(block);
    noteWaitingBlocksLocked();
  }
}

DeviceCachingAllocator::ProfilerReport DeviceCachingAllocator::profilerReportLocked(
    const DeviceBlock* block, int64_t delta) const {
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  return {block->ptr, delta, static_cast<size_t>(stats_.allocated_bytes[aggregate].current),
          static_cast<size_t>(stats_.reserved_bytes[aggregate].current), block->device};
}

void DeviceCachingAllocator::reportToProfiler(const ProfilerReport& report) noexcept {
  try {
    c10::reportMemoryUsageToProfiler(report.ptr, report.delta, report.allocated, report.reserved,
                                     c10::Device(c10::DeviceType::PrivateUse1, report.device));
  } catch (...) {
    // Profiling must not turn a free into a failure.
  }
}

void DeviceCachingAllocator::recordStream(DeviceBlock* block, c10::StreamId stream) {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  if (stream == block->stream) return;  // stream order already protects it
  handleLocked(stream, block->device);  // free() reads it and must not resolve
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  std::atomic_ref<bool>(block->used_elsewhere).store(true, std::memory_order_relaxed);
  if (stream >= 0 && stream < 128) {
    std::atomic_ref<uint64_t>(block->recorded_bits[static_cast<size_t>(stream) / 64])
        .fetch_or(uint64_t{1} << (static_cast<size_t>(stream) % 64), std::memory_order_relaxed);
  }
}

void DeviceCachingAllocator::insertEventsLocked(DeviceBlock* block) {
  auto& uses = block->stream_uses;
  while (!uses.empty()) {
    const c10::StreamId id = uses.back();
    flex::RuntimeStream* handle = handles_[static_cast<size_t>(id)];
    auto event = std::make_unique<flex::RuntimeEvent>();
    bool pending = true;
    try {
      event->record(handle);
      sanitizer::onEventRecord(event.get(), id);
      pending = !event->query();  // idle: nothing launched on it can still touch the block
      if (!pending) sanitizer::onBlockReleased(event.get(), block->ptr, block->size);
    } catch (const flex::Error&) {
      pending = false;  // failed stream, shut down or forked: its queued work is gone
    }
    if (!pending) {
      sanitizer::onEventDestroy(event.get());
      keepSettledLocked(id, std::move(event));
    }
    if (pending) {
      events_[id].push_back({std::move(event), block});
      ++block->event_count;
      noteWaitingBlocksLocked();
    }
    uses.pop_back();
  }
}

void DeviceCachingAllocator::keepSettledLocked(c10::StreamId id,
                                               std::unique_ptr<flex::RuntimeEvent> event) {
  static const bool card_timing = flex::card::enabled();
  // Events complete in record order on their stream: a later one covers an earlier.
  if (card_timing && event) settled_events_[id] = std::move(event);
}

void DeviceCachingAllocator::processEventsLocked() {
  for (auto it = events_.begin(); it != events_.end();) {
    auto& queue = it->second;
    // A stream completes its events in record order: stop at the first pending one.
    while (!queue.empty() && queue.front().event->query()) {
      DeviceBlock* block = queue.front().block;
      // The block's reuse is ordered after the uses the event covers.
      sanitizer::onBlockReleased(queue.front().event.get(), block->ptr, block->size);
      sanitizer::onEventDestroy(queue.front().event.get());
      keepSettledLocked(it->first, std::move(queue.front().event));
      queue.pop_front();
      if (--block->event_count == 0 && !block->deferred) freeBlockLocked(block);
    }
    it = queue.empty() ? events_.erase(it) : std::next(it);
  }
  noteWaitingBlocksLocked();
}

void DeviceCachingAllocator::noteWaitingBlocksLocked() noexcept {
  waiting_blocks_.store(!events_.empty() || deferred_ != nullptr, std::memory_order_relaxed);
}

DeviceCachingAllocator::Pool& DeviceCachingAllocator::poolOf(const DeviceBlock* block) {
  if (block->private_pool != nullptr) {
    return block->small ? block->private_pool->small : block->private_pool->large;
  }
  return block->small ? small_pool_ : large_pool_;
}

void DeviceCachingAllocator::usePool(PoolId id) {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  std::unique_ptr<PrivatePool>& pool = private_pools_[id];
  if (pool == nullptr) {
    pool = std::make_unique<PrivatePool>();
    pool->id = id;
  }
  ++pool->use_count;
}

void DeviceCachingAllocator::releasePool(PoolId id) {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  const auto it = private_pools_.find(id);
  if (it == private_pools_.end()) return;
  if (--it->second->use_count == 0 && it->second->segments == 0) private_pools_.erase(it);
}

bool DeviceCachingAllocator::isInPool(const DeviceBlock* block, PoolId id) {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  const auto it = private_pools_.find(id);
  return it != private_pools_.end() && block->private_pool == it->second.get();
}

void DeviceCachingAllocator::freeBlockLocked(DeviceBlock* block, const Context& context) {
  if (C10_UNLIKELY(history_.recordingLocked())) {
    history_.recordLocked(HistoryAction::FREE_COMPLETED, block->device,
                          reinterpret_cast<uintptr_t>(block->ptr), block->requested_size,
                          block->stream, poolIdOf(block), context ? context : block->context);
  }
  if (C10_UNLIKELY(block->context != nullptr)) block->context.reset();
  Pool& pool = poolOf(block);
  const auto original_size = static_cast<int64_t>(block->size);
  int64_t split_blocks = 0;
  int64_t split_bytes = 0;
  for (DeviceBlock* neighbour : {block->prev, block->next}) {
    if (const size_t merged = mergeLocked(block, neighbour, pool)) {
      split_blocks -= 1;
      split_bytes -= static_cast<int64_t>(merged);
    }
  }
  pool.blocks.insert(std::move(block->pool_node));  // allocates nothing
  if (block->isSplit()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(block->size);
  }
  updateStat(stats_.inactive_split, block->small, split_blocks);
  updateStat(stats_.inactive_split_bytes, block->small, split_bytes);
  updateStat(stats_.active, block->small, -1);
  updateStat(stats_.active_bytes, block->small, -original_size);
  updateStat(stats_.requested_bytes, block->small, -static_cast<int64_t>(block->requested_size));
  block->requested_size = 0;
}

size_t DeviceCachingAllocator::mergeLocked(DeviceBlock* into, DeviceBlock* neighbour,
                                           Pool& pool) {
  if (neighbour == nullptr || neighbour->allocated || neighbour->event_count > 0 ||
      neighbour->deferred) {
    return 0;
  }
  if (into->prev == neighbour) {
    into->ptr = neighbour->ptr;
    into->prev = neighbour->prev;
    if (into->prev != nullptr) {
      into->prev->next = into;
    } else {
      into->segment->head = into;
    }
  } else {
    into->next = neighbour->next;
    if (into->next != nullptr) into->next->prev = into;
  }
  const size_t merged = neighbour->size;
  into->size += merged;
  neighbour->pool_node = pool.blocks.extract(neighbour);
  keepBlockObjectLocked(neighbour);
  return merged;
}

DeviceBlock* DeviceCachingAllocator::blockObjectLocked(char* ptr, size_t size,
                                                       c10::StreamId stream,
                                                       c10::DeviceIndex device, bool small) {
  DeviceBlock* block = spare_blocks_;
  if (block == nullptr) {
    block = newBlock(ptr, size, stream, device, small);
    ++block_objects_made_;
    return block;
  }
  spare_blocks_ = block->next;
  --spare_block_count_;
  BlockSet::node_type node = std::move(block->pool_node);
  *block = DeviceBlock{ptr, size, stream, device, small};
  block->pool_node = std::move(node);
  return block;
}

void DeviceCachingAllocator::keepBlockObjectLocked(DeviceBlock* block) {
  // Bounded: what a burst of splits left behind is freed beyond this.
  constexpr size_t kMaxSpareBlocks = 4096;
  if (spare_block_count_ >= kMaxSpareBlocks) {
    delete block;
    return;
  }
  block->context.reset();  // what it held (a stack) goes now
  block->stream_uses.clear();
  block->prev = nullptr;
  block->next = spare_blocks_;
  spare_blocks_ = block;
  ++spare_block_count_;
}

int64_t DeviceCachingAllocator::blockObjectsMade() {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  return block_objects_made_;
}

void DeviceCachingAllocator::releaseCachedBlocks(const Context& context) {
  // Blocks waiting for events: wait for the events, then free the blocks.
  std::vector<PendingEvent> pending;
  std::vector<std::unique_ptr<flex::RuntimeEvent>> settled;
  {
    const std::unique_lock<std::mutex> lock = lockAndDrain();
    retryDeferredLocked();
    for (auto& [id, queue] : events_) {
      for (PendingEvent& entry : queue) pending.push_back(std::move(entry));
    }
    events_.clear();
    noteWaitingBlocksLocked();  // those blocks wait below, outside every pool
    for (auto& [id, event] : settled_events_) settled.push_back(std::move(event));
    settled_events_.clear();
    ++stats_.num_sync_all_streams;
  }
  // A wait that fails (its stream failed: the queued work is gone) still
  // frees its block; every block is returned below whatever happens here.
  waitForDevice([&] {
    for (const PendingEvent& entry : pending) {
      try {
        entry.event->synchronize();
      } catch (const flex::Error&) {
      }
    }
    for (const auto& event : settled) {
      try {
        event->synchronize();  // complete: only the modeled host time moves
      } catch (const flex::Error&) {
      }
    }
  });
  for (const PendingEvent& entry : pending) {
    sanitizer::onEventComplete(entry.event.get());
    sanitizer::onEventDestroy(entry.event.get());
  }
  std::vector<DeviceBlock*> segments;
  std::set<c10::StreamId> allocation_streams;
  {
    const std::unique_lock<std::mutex> lock = lockAndDrain();
    for (const PendingEvent& entry : pending) {
      if (--entry.block->event_count == 0 && !entry.block->deferred) freeBlockLocked(entry.block);
    }
    // Whole free segments leave the pools now; a split one still has a
    // block in use. A private pool's only once no graph holds it.
    std::vector<Pool*> pools{&small_pool_, &large_pool_};
    for (const auto& [id, pool] : private_pools_) {
      if (pool->use_count == 0) {
        pools.push_back(&pool->small);
        pools.push_back(&pool->large);
      }
    }
    for (Pool* pool : pools) {
      for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
        DeviceBlock* block = *it;
        if (block->isSplit()) {
          ++it;
          continue;
        }
        segments.push_back(block);
        allocation_streams.insert(block->stream);
        it = pool->blocks.erase(it);
        // Out of snapshots from here on, and in the trace before a new
        // segment can reuse its address.
        unlinkSegmentLocked(block->segment);
        history_.recordLocked(HistoryAction::SEGMENT_FREE, block->device,
                              reinterpret_cast<uintptr_t>(block->ptr), block->size, block->stream,
                              poolIdOf(block), context ? context : block->segment->context);
      }
    }
  }
  // As cudaFree waits for the device: device memory handed back must be done
  // with. A block freed on its allocation stream may still be used by work
  // queued there, so each such stream is drained (an event: cheap when idle).
  std::vector<flex::RuntimeStream*> handles;
  {
    const std::unique_lock<std::mutex> lock = lockAndDrain();
    for (const c10::StreamId id : allocation_streams) {
      handles.push_back(handles_[static_cast<size_t>(id)]);
    }
  }
  waitForDevice([&] {
    for (flex::RuntimeStream* handle : handles) {
      flex::RuntimeEvent done;
      try {
        done.record(handle);
        done.synchronize();
      } catch (const flex::Error&) {
        // failed stream or shut down: its queued work is gone
      }
    }
  });
  for (const c10::StreamId id : allocation_streams) sanitizer::onStreamComplete(id);
  // A graph's pool is used by its replays, on whatever stream they were
  // launched: its segments go back only once every stream is idle.
  if (std::any_of(segments.begin(), segments.end(),
                  [](const DeviceBlock* segment) { return segment->private_pool != nullptr; })) {
    synchronizeDeviceKeepingFailures();
  }
  for (DeviceBlock* segment : segments) {
    try {
      if (flex::RuntimeContext* context = flex::RuntimeContext::get()) {
        context->deallocate(segment->ptr);
      }
    } catch (...) {
      // A torn-down runtime: the memory goes with the process.
    }
  }
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  for (DeviceBlock* segment : segments) {
    if (PrivatePool* owner = segment->private_pool) {
      --owner->segments;
    }
    updateStat(stats_.segment, segment->small, -1);
    updateStat(stats_.reserved_bytes, segment->small, -static_cast<int64_t>(segment->size));
    ++stats_.num_device_free;
    delete segment->segment;
    delete segment;
  }
  for (auto it = private_pools_.begin(); it != private_pools_.end();) {
    const bool unused = it->second->use_count == 0 && it->second->segments == 0;
    it = unused ? private_pools_.erase(it) : std::next(it);
  }
}

void DeviceCachingAllocator::emptyCache() {
  releaseCachedBlocks(history_.gather(RecordContext::ALL));
}

void DeviceCachingAllocator::throwOutOfMemory(std::unique_lock<std::mutex>& lock,
                                              c10::DeviceIndex device, size_t nbytes,
                                              size_t segment_bytes, const char* reason,
                                              c10::StreamId stream, size_t size, PoolId pool,
                                              const Context& context) {
  ++stats_.num_ooms;
  const auto aggregate = static_cast<size_t>(StatType::AGGREGATE);
  const int64_t allocated = stats_.allocated_bytes[aggregate].current;
  const int64_t reserved = stats_.reserved_bytes[aggregate].current;
  const bool recording = history_.recordingLocked();
  lock.unlock();
  const flex::MemoryStats device_stats = runtimeContext()->memoryStats();
  if (recording) {
    lock.lock();
    history_.recordLocked(HistoryAction::OOM, device,
                          device_stats.total_bytes - device_stats.allocated_bytes, size, stream,
                          pool, context);
    lock.unlock();
  }
  const std::string segment =
      segment_bytes == 0 ? "" : " (a segment of " + std::to_string(segment_bytes) + " bytes)";
  TORCH_CHECK_WITH(OutOfMemoryError, false, "Spyre out of memory on spyre:",
                   static_cast<int>(device), ": tried to allocate ", nbytes, " bytes", segment,
                   "; the device has ", device_stats.total_bytes,
                   " bytes in total, ", device_stats.total_bytes - device_stats.allocated_bytes,
                   " free; PyTorch holds ", allocated, " bytes in tensors and ", reserved,
                   " bytes reserved (tensors plus cached blocks). Runtime: ", reason);
}

c10::CachingDeviceAllocator::DeviceStats DeviceCachingAllocator::stats() {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  c10::CachingDeviceAllocator::DeviceStats stats = stats_;
  stats.max_split_size = -1;  // no split limit: CUDA's default reads SIZE_MAX as -1
  return stats;
}

void DeviceCachingAllocator::resetAccumulatedStats() {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  forEachStatArray(stats_, [](Stat& stat) { stat.reset_accumulated(); });
  stats_.oversize_allocations.reset_accumulated();
  stats_.oversize_segments.reset_accumulated();
  stats_.num_alloc_retries = 0;
  stats_.num_ooms = 0;
  stats_.num_sync_all_streams = 0;
  stats_.num_device_alloc = 0;
  stats_.num_device_free = 0;
}

void DeviceCachingAllocator::resetPeakStats() {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  forEachStatArray(stats_, [](Stat& stat) { stat.reset_peak(); });
  stats_.oversize_allocations.reset_peak();
  stats_.oversize_segments.reset_peak();
}

void DeviceCachingAllocator::lockForFork() {
  mutex_.lock();
  drainUnlockedFreesLocked();
}

// In the child too: the forking thread, its only thread, took the lock.
void DeviceCachingAllocator::unlockAfterFork() {
  mutex_.unlock();
}

void DeviceCachingAllocator::linkSegmentLocked(DeviceSegment* segment) {
  segment->next = segments_;
  if (segments_ != nullptr) segments_->prev = segment;
  segments_ = segment;
}

void DeviceCachingAllocator::unlinkSegmentLocked(DeviceSegment* segment) {
  if (segment->prev != nullptr) {
    segment->prev->next = segment->next;
  } else {
    segments_ = segment->next;
  }
  if (segment->next != nullptr) segment->next->prev = segment->prev;
  segment->prev = segment->next = nullptr;
}

void DeviceCachingAllocator::recordHistory(const HistorySettings& settings) {
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  history_.configureLocked(settings);
  history_on_.store(history_.recordingLocked(), std::memory_order_relaxed);
}

MemorySnapshot DeviceCachingAllocator::snapshot() {
  MemorySnapshot snapshot;
  const std::unique_lock<std::mutex> lock = lockAndDrain();
  size_t total_active = 0;
  for (const DeviceSegment* segment = segments_; segment != nullptr; segment = segment->next) {
    const DeviceBlock* head = segment->head;
    SnapshotSegment& info = snapshot.segments.emplace_back();
    info.device = head->device;
    info.address = reinterpret_cast<uintptr_t>(head->ptr);
    info.stream = head->stream;
    info.is_large = !head->small;
    info.pool = poolIdOf(head);
    info.context = segment->context;
    for (const DeviceBlock* block = head; block != nullptr; block = block->next) {
      const bool active = block->allocated || block->event_count > 0 || block->deferred;
      info.blocks.push_back(
          {block->size, block->requested_size, block->allocated, active, block->context});
      info.total_size += block->size;
      if (block->allocated) info.allocated_size += block->size;
      if (active) {
        info.active_size += block->size;
        info.requested_size += block->requested_size;
      }
    }
    total_active += info.active_size;
  }
  std::sort(snapshot.segments.begin(), snapshot.segments.end(),
            [](const SnapshotSegment& a, const SnapshotSegment& b) {
              return a.address < b.address;
            });
  // As CUDA: the trace marks where the snapshot was taken.
  const int bound = detail::bound_device.load(std::memory_order_acquire);
  const c10::DeviceIndex device =
      bound >= 0 ? static_cast<c10::DeviceIndex>(bound) : currentDevice();
  history_.recordLocked(HistoryAction::SNAPSHOT, device, 0, total_active, 0, {0, 0}, nullptr);
  snapshot.trace = history_.entriesLocked();
  return snapshot;
}

}  // namespace spyre
