#include "device/memory_history.h"

#include <algorithm>
#include <chrono>

namespace spyre {

Context MemoryHistory::gatherSlow(RecordContext level) const {
  if (when_.load(std::memory_order_acquire) < level) return nullptr;
  const auto gather = gather_.load(std::memory_order_acquire);
  if (gather == nullptr) return nullptr;
  try {
    return gather();
  } catch (...) {
    return nullptr;  // a missing stack must not fail an allocation or a free
  }
}

void MemoryHistory::configureLocked(const HistorySettings& settings) {
  // As CUDA: stopping drops the trace; the contexts kept on blocks stay.
  if (!settings.enabled || settings.clear) {
    ring_.clear();
    next_ = 0;
  }
  const size_t max_entries = std::max<size_t>(settings.max_entries, 1);
  if (max_entries != max_entries_) {
    std::vector<HistoryEntry> entries = entriesLocked();
    if (entries.size() > max_entries) {
      entries.erase(entries.begin(), entries.end() - static_cast<ptrdiff_t>(max_entries));
    }
    ring_ = std::move(entries);
    next_ = 0;
    max_entries_ = max_entries;
  }
  skip_ = 0;
  for (const HistoryAction action : settings.skip) skip_ |= 1u << static_cast<unsigned>(action);
  enabled_ = settings.enabled;
  entry_context_ = settings.enabled ? settings.when : RecordContext::NEVER;
  gather_.store(settings.enabled ? settings.gather : nullptr, std::memory_order_release);
  when_.store(entry_context_, std::memory_order_release);
}

void MemoryHistory::recordLocked(HistoryAction action, c10::DeviceIndex device, uintptr_t addr,
                                 size_t size, c10::StreamId stream, PoolId pool,
                                 const Context& context) noexcept {
  if (!enabled_ || (skip_ & (1u << static_cast<unsigned>(action))) != 0) return;
  const auto time_us = std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  // Trace entries keep stacks from context="alloc" on, as CUDA's.
  HistoryEntry entry{action, device, addr, size, stream, pool, time_us,
                     entry_context_ >= RecordContext::ALLOC ? context : nullptr};
  try {
    if (ring_.size() < max_entries_) {
      ring_.push_back(std::move(entry));
    } else {
      ring_[next_] = std::move(entry);
      next_ = next_ + 1 == max_entries_ ? 0 : next_ + 1;
    }
  } catch (...) {
    // Out of host memory: the history loses this entry, the allocator nothing.
  }
}

std::vector<HistoryEntry> MemoryHistory::entriesLocked() const {
  std::vector<HistoryEntry> entries;
  entries.reserve(ring_.size());
  entries.insert(entries.end(), ring_.begin() + static_cast<ptrdiff_t>(next_), ring_.end());
  entries.insert(entries.end(), ring_.begin(), ring_.begin() + static_cast<ptrdiff_t>(next_));
  return entries;
}

}  // namespace spyre
