// The block pools behind the spyre device allocator: a stream-aware caching
// allocator with CUDA's rules (docs/tensors.md, "Device allocator").
//
// - Device memory is taken from the runtime in segments: requests up to 1 MiB
//   come from 2 MiB segments (small pool), requests up to 10 MiB from 20 MiB
//   segments, larger ones from segments rounded up to 2 MiB (large pool).
//   Requests are rounded up to 512 bytes.
// - A block is the best fitting free block of its pool, split when the rest is
//   worth keeping (>= 512 bytes in the small pool, > 1 MiB in the large one).
//   A freed block merges with free neighbours of its segment.
// - Blocks belong to their allocation stream: a freed block is reused at once,
//   but only by allocations on that stream (stream order makes that safe). A
//   block recorded on other streams gets an event on each of them at free time
//   and returns to its pool when they have all completed.
// - Cached memory goes back to the runtime only on empty_cache() or when an
//   allocation fails; then the allocation is retried once.
// - Graphs (docs/graphs.md): while a stream captures, its allocations come from
//   the capture's private pool (segments of its own, with the same rules),
//   and blocks freed later return there. A private pool's memory stays
//   reserved while a graph holds it (usePool/releasePool); once none does, its
//   free segments go back to the runtime at the next empty_cache().
// - Memory history (device/memory_history.h): segments are linked in a list
//   so a snapshot finds every block; with history on, blocks and segments
//   keep the context of their allocation and actions go to the trace.
//
// One mutex guards everything, with two exceptions, taken only while nothing
// observes frees and allocations as they happen (no memory history, no memory
// profiling):
// - free() of a block used on its allocation stream only takes no lock. It
//   pushes the block on a lock-free list (unlocked_frees_), and every call that
//   takes the lock returns those blocks to their pools, with their stats,
//   before it reads or changes anything: what any caller sees is as if each
//   free had taken the lock.
// - The latest such block of a common pool waits in one slot
//   (reusable_free_) instead: a malloc() on its stream asking for the size it
//   was asked for, outside any capture, takes it back without the lock (a loop
//   of same-shaped ops reuses one block, as the pools would, without merging
//   and splitting it). Its stats are counted lock-free and folded into the
//   stats by the next call that takes the lock: allocations and frees counted,
//   nothing else changes (the block was allocated, with that size, before).
//   Not while blocks wait for events or a deferred free (waiting_blocks_):
//   such a malloc() takes the lock, which returns those that are done to
//   their pools first, as CUDA's does.
//
// No wait on device work happens under the mutex (no
// lock is held across a wait): a wait lasts as long as the queued work, and
// every thread that allocates or frees (host threads, autograd's device
// thread, c10d's worker threads releasing collectives' tensors) would stall
// behind it. Engine threads never enter it: queued work holds no tensors
// (launch/tensor_ref.h). It is held across fork(), so a forked child can free
// the blocks it inherited.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <flex/flex.hpp>

#include "device/memory_history.h"
#include "runtime/stream.h"

namespace spyre {

struct DeviceBlock;
struct DeviceSegment;
struct PrivatePool;
// Pool order: allocation stream, then size, then address.
struct BlockBySize {
  bool operator()(const DeviceBlock* a, const DeviceBlock* b) const;
};
using BlockSet = std::set<DeviceBlock*, BlockBySize>;

// A piece of a segment: allocated, waiting for events, or free in its pool.
struct DeviceBlock {
  char* ptr;
  size_t size;
  c10::StreamId stream;  // allocation stream: the only one that may reuse it
  c10::DeviceIndex device;
  bool small;  // pool: small (requests <= 1 MiB) or large
  PrivatePool* private_pool = nullptr;  // a graph's pool, or null: the common pools
  bool allocated = false;
  size_t requested_size = 0;  // what the caller asked for, before rounding
  int event_count = 0;        // events recorded at free time, not yet completed
  std::vector<c10::StreamId> stream_uses;  // recorded streams other than `stream`
  // Whether stream_uses is non-empty: set under the lock (recordStream),
  // read without it (free()'s unlocked path). Cleared when handed out.
  bool used_elsewhere = false;
  // The ids below 128 among stream_uses, one bit each, set under the lock and
  // read without it (recordedOn()): a block recorded on a stream once needs
  // no lock to be recorded on it again. Cleared when the block is handed out.
  std::array<uint64_t, 2> recorded_bits{};
  bool recordedOn(c10::StreamId id) const {
    if (id < 0 || id >= 128) return false;
    return (std::atomic_ref<const uint64_t>(recorded_bits[static_cast<size_t>(id) / 64])
                .load(std::memory_order_relaxed) >>
            (static_cast<size_t>(id) % 64)) &
           1U;
  }
  DeviceBlock* prev = nullptr;  // neighbours in the segment
  DeviceBlock* next = nullptr;
  DeviceSegment* segment = nullptr;
  Context context;  // where it was allocated (memory history), while allocated or pending
  // The block's node of its pool's set while it is out of the pool (made with
  // the block, where throwing is allowed), so returning it to the pool in
  // free() allocates nothing.
  BlockSet::node_type pool_node;
  // free() could not record its events (no memory): the block waits, out of
  // its pool, in the deferred list until malloc() or emptyCache() retries.
  bool deferred = false;
  DeviceBlock* next_deferred = nullptr;
  // The next block of the allocator's unlocked_frees_ list, while on it.
  DeviceBlock* next_unlocked_free = nullptr;

  bool isSplit() const { return prev != nullptr || next != nullptr; }
};

// A runtime allocation: its blocks, from `head` on, linked through prev/next.
// Segments are linked in the allocator's list, for snapshots.
struct DeviceSegment {
  DeviceBlock* head;
  Context context;  // where it was allocated (memory history)
  DeviceSegment* prev = nullptr;
  DeviceSegment* next = nullptr;
};

// Free blocks of one size class.
struct BlockPool {
  BlockSet blocks;  // free blocks
  bool is_small;
};

// A graph's private pool: its own free blocks, and how many segments and
// graphs it has.
struct PrivatePool {
  std::pair<uint64_t, uint64_t> id;
  BlockPool small{{}, true};
  BlockPool large{{}, false};
  int use_count = 0;    // graphs holding it
  size_t segments = 0;  // segments taken from the runtime for it
};

class DeviceCachingAllocator {
 public:
  using PoolId = std::pair<uint64_t, uint64_t>;
  // A graph holds the private pool `id` (created at its first use).
  void usePool(PoolId id);
  // The graph let go of it: once no graph holds it, its free segments go back
  // to the runtime at the next empty_cache().
  void releasePool(PoolId id);
  // Whether the allocated `block` came from the private pool `id`.
  bool isInPool(const DeviceBlock* block, PoolId id);

  // A block of at least `nbytes` (> 0) for the current stream of `device`.
  // Raises c10::OutOfMemoryError naming the sizes when even a retry after
  // releasing every cached block fails.
  DeviceBlock* malloc(size_t nbytes, c10::DeviceIndex device);
  // The host dropped the block. Never throws: called from deleters. Returning
  // the block to its pool allocates nothing; the events a block used on other
  // streams needs are allocated, and when that fails the block is deferred
  // (kept out of every pool, in an intrusive list) to the next malloc().
  // A block used on its allocation stream only, while no memory history or
  // memory profiling watches, is freed without the lock (see above).
  void free(DeviceBlock* block) noexcept;
  // `stream` used the block: a later free waits for the work launched on it.
  void recordStream(DeviceBlock* block, c10::StreamId stream);
  // Waits for pending frees, then returns every unused segment to the runtime.
  void emptyCache();

  c10::CachingDeviceAllocator::DeviceStats stats();
  // Block objects allocated so far (splits reuse those merges gave back): for tests.
  int64_t blockObjectsMade();
  void resetAccumulatedStats();
  void resetPeakStats();

  // fork(): the forking thread holds the lock across it, so the child's copy
  // of the pools is consistent and unlocked (pthread_atfork, fork_gate.cpp).
  void lockForFork();
  void unlockAfterFork();

  // Memory history: torch.spyre.memory._record_memory_history's settings, and
  // the blocks of every segment plus the trace (recording a "snapshot" entry).
  void recordHistory(const HistorySettings& settings);
  MemorySnapshot snapshot();

 private:
  using Pool = BlockPool;
  // The pool a free block returns to.
  Pool& poolOf(const DeviceBlock* block);
  struct PendingEvent {
    std::unique_ptr<flex::RuntimeEvent> event;
    DeviceBlock* block;
  };

  // An allocation (delta > 0) or free as torch's profiler records it
  // (profile_memory=True): block sizes, like CUDA's allocator reports them.
  // Taken under the lock, reported after it (no profiler code under our lock).
  struct ProfilerReport {
    void* ptr;
    int64_t delta;
    size_t allocated;  // allocated bytes after the change
    size_t reserved;
    c10::DeviceIndex device;
  };
  ProfilerReport profilerReportLocked(const DeviceBlock* block, int64_t delta) const;
  static void reportToProfiler(const ProfilerReport& report) noexcept;

  flex::RuntimeStream* handleLocked(c10::StreamId stream, c10::DeviceIndex device);
  DeviceBlock* takeFreeBlockLocked(Pool& pool, c10::StreamId stream, size_t size);
  // A new segment, or nullptr with `runtime_message` set when the runtime is out of memory.
  DeviceBlock* allocateSegmentLocked(Pool& pool, PrivatePool* owner, c10::StreamId stream,
                                     c10::DeviceIndex device, size_t segment_bytes,
                                     std::string& runtime_message, const Context& context);
  DeviceBlock* splitAndActivateLocked(DeviceBlock* block, size_t size, size_t requested);
  // Records an event on every stream the block was used on; a use leaves
  // block->stream_uses only once its event is queued, so a retry after a
  // throw continues where it stopped.
  void insertEventsLocked(DeviceBlock* block);
  // Retries the deferred frees (may throw: called where throwing is allowed).
  void retryDeferredLocked();
  void processEventsLocked();
  // waiting_blocks_, after events_ or deferred_ changed.
  void noteWaitingBlocksLocked() noexcept;
  // Card timing: keeps `event` (complete) as `id`'s latest settled event.
  void keepSettledLocked(c10::StreamId id, std::unique_ptr<flex::RuntimeEvent> event);
  // The locked part of free(): stats, events, the block back to its pool.
  // `report`, when given: the profiler's report of the free.
  void releaseLocked(DeviceBlock* block, const Context& context,
                     ProfilerReport* report = nullptr) noexcept;
  // Releases the blocks free() pushed without the lock. First thing after
  // taking the lock, in every call that takes it.
  void drainUnlockedFreesLocked() noexcept;
  // The lock, taken, with the unlocked frees drained.
  std::unique_lock<std::mutex> lockAndDrain();
  // Pushes `block` on unlocked_frees_.
  void pushUnlockedFree(DeviceBlock* block) noexcept;
  // reusable_free_'s block when it answers this request (see the top of this
  // file), or nullptr.
  DeviceBlock* takeReusableFree(size_t nbytes, c10::StreamId stream, c10::DeviceIndex device);
  // Adds the lock-free reuses to stats_.
  void foldUnlockedReusesLocked() noexcept;
  // `context`: the free's, when the host asked for it now (memory history).
  void freeBlockLocked(DeviceBlock* block, const Context& context = nullptr);
  size_t mergeLocked(DeviceBlock* into, DeviceBlock* neighbour, Pool& pool);
  // A block object for a split: one a merge gave back (with its pool node), or
  // a new one. Splitting and merging then allocate nothing: a first pass over
  // new shapes splits and merges a block at every op.
  DeviceBlock* blockObjectLocked(char* ptr, size_t size, c10::StreamId stream,
                                 c10::DeviceIndex device, bool small);
  // Keeps a merged-away block object (its pool node extracted) for the next split.
  void keepBlockObjectLocked(DeviceBlock* block);
  // Frees (into their pools) the blocks waiting for events, after waiting for
  // those events; then returns every free segment to the runtime. Called
  // without the lock.
  void releaseCachedBlocks(const Context& context);
  [[noreturn]] void throwOutOfMemory(std::unique_lock<std::mutex>& lock, c10::DeviceIndex device,
                                     size_t nbytes, size_t segment_bytes, const char* reason,
                                     c10::StreamId stream, size_t size, PoolId pool,
                                     const Context& context);
  static PoolId poolIdOf(const DeviceBlock* block) {
    return block->private_pool != nullptr ? block->private_pool->id : PoolId{0, 0};
  }
  void linkSegmentLocked(DeviceSegment* segment);
  void unlinkSegmentLocked(DeviceSegment* segment);

  std::mutex mutex_;
  Pool small_pool_{{}, true};
  Pool large_pool_{{}, false};
  // Events recorded at free time, per recorded stream, in record order.
  std::map<c10::StreamId, std::deque<PendingEvent>> events_;
  // Card timing: per stream, the latest of those events found complete. The
  // host finding an event complete is a fact of its pace, not of the card's:
  // empty_cache() waits for these too, so the modeled host time it reaches is
  // the same whether a query() saw them done or not (docs/timing.md).
  std::map<c10::StreamId, std::unique_ptr<flex::RuntimeEvent>> settled_events_;
  // Runtime handles by stream id, resolved once (an id never changes handle).
  std::array<flex::RuntimeStream*, kMaxStreamIds> handles_{};
  c10::CachingDeviceAllocator::DeviceStats stats_;
  DeviceBlock* deferred_ = nullptr;  // see DeviceBlock::deferred
  // Blocks free() released without the lock, most recent first.
  std::atomic<DeviceBlock*> unlocked_frees_{nullptr};
  // The latest of them, when of a common pool: see the top of this file.
  std::atomic<DeviceBlock*> reusable_free_{nullptr};
  // Whether events_ or deferred_ holds blocks (noteWaitingBlocksLocked).
  std::atomic<bool> waiting_blocks_{false};
  // Reuses of reusable_free_ not yet in stats_, per pool (small, large).
  struct UnlockedReuses {
    std::atomic<int64_t> count{0};
    std::atomic<int64_t> bytes{0};      // block sizes
    std::atomic<int64_t> requested{0};  // requested sizes
  };
  std::array<UnlockedReuses, 2> unlocked_reuses_;
  // history_.recordingLocked(), readable without the lock.
  std::atomic<bool> history_on_{false};
  DeviceBlock* spare_blocks_ = nullptr;  // kept block objects, linked through `next`
  size_t spare_block_count_ = 0;
  int64_t block_objects_made_ = 0;
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  DeviceSegment* segments_ = nullptr;  // every segment, most recent first
  MemoryHistory history_;
};

}  // namespace spyre
