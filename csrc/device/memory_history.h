// The device allocator's memory history, for torch.spyre.memory's
// _record_memory_history / _snapshot (docs/tensors.md, "Memory snapshots"):
// CUDA's trace of allocator actions, kept in a ring of at most max_entries,
// and the stack contexts gathered for blocks, segments and trace entries.
//
// Contexts are gathered by a function the Python layer registers (it never
// takes the GIL on a thread that has not run Python, such as an engine
// thread), before the allocator takes its lock. With history off that costs
// one relaxed load per malloc and free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <c10/macros/Macros.h>

namespace spyre {

using Context = std::shared_ptr<c10::GatheredContext>;
using HistoryAction = c10::CachingDeviceAllocator::TraceEntry::Action;
using c10::CachingDeviceAllocator::RecordContext;
using PoolId = std::pair<uint64_t, uint64_t>;

// What _record_memory_history asked for.
struct HistorySettings {
  bool enabled = false;  // record the trace
  RecordContext when = RecordContext::NEVER;
  c10::CachingDeviceAllocator::CreateContextFn gather = nullptr;
  size_t max_entries = 1;
  bool clear = false;
  std::vector<HistoryAction> skip;  // actions not recorded
};

// One allocator action, with CUDA's TraceEntry fields.
struct HistoryEntry {
  HistoryAction action;
  c10::DeviceIndex device;
  uintptr_t addr;  // for OOM: the device's free bytes
  size_t size;
  c10::StreamId stream;
  PoolId pool;
  int64_t time_us;  // since the epoch
  Context context;
};

// The allocator's state, as CUDA's SegmentInfo / BlockInfo describe it.
struct SnapshotBlock {
  size_t size;
  size_t requested_size;
  bool allocated;
  bool active;  // allocated, or waiting for events on other streams
  Context context;
};

struct SnapshotSegment {
  c10::DeviceIndex device;
  uintptr_t address;
  size_t total_size = 0;
  size_t allocated_size = 0;
  size_t active_size = 0;
  size_t requested_size = 0;
  c10::StreamId stream;
  bool is_large;
  PoolId pool;
  Context context;
  std::vector<SnapshotBlock> blocks;
};

struct MemorySnapshot {
  std::vector<SnapshotSegment> segments;  // by address
  std::vector<HistoryEntry> trace;        // oldest first
};

// Guarded by the allocator's lock, except gather(), called before it.
class MemoryHistory {
 public:
  // The context to keep for an action of `level`, or null.
  Context gather(RecordContext level) const {
    if (C10_LIKELY(when_.load(std::memory_order_relaxed) < level)) return nullptr;
    return gatherSlow(level);
  }

  void configureLocked(const HistorySettings& settings);
  bool recordingLocked() const { return enabled_; }
  // Appends an entry (dropped when the host is out of memory: never throws).
  void recordLocked(HistoryAction action, c10::DeviceIndex device, uintptr_t addr, size_t size,
                    c10::StreamId stream, PoolId pool, const Context& context) noexcept;
  std::vector<HistoryEntry> entriesLocked() const;

 private:
  Context gatherSlow(RecordContext level) const;

  std::atomic<RecordContext> when_{RecordContext::NEVER};
  std::atomic<c10::CachingDeviceAllocator::CreateContextFn> gather_{nullptr};
  bool enabled_ = false;
  RecordContext entry_context_ = RecordContext::NEVER;  // when_, read under the lock
  size_t max_entries_ = 1;
  uint32_t skip_ = 0;  // bit per HistoryAction
  std::vector<HistoryEntry> ring_;
  size_t next_ = 0;  // the oldest entry once ring_ is full
};

}  // namespace spyre
