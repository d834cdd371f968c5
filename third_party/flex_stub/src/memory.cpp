// Device memory behind a budget: the budget (FLEX_STUB_MEMORY_BYTES) models the
// card's capacity; the pages live in the device arena (device_arena.hpp), where
// the host cannot touch them. Pinned memory is ordinary host memory.
#include "memory.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "device_arena.hpp"
#include "format.hpp"

namespace flex::detail {
namespace {

constexpr size_t kAlignment = 64;

// 64-byte aligned; size 0 still gets its own block so every pointer is unique.
void* alignedBlock(size_t nbytes) {
  if (nbytes > SIZE_MAX - kAlignment) return nullptr;
  const size_t rounded = std::max<size_t>((nbytes + kAlignment - 1) / kAlignment, 1) * kAlignment;
  return std::aligned_alloc(kAlignment, rounded);
}

}  // namespace

Memory::Memory(size_t total_bytes) { stats_.total_bytes = total_bytes; }

bool Memory::containsLocked(const Registry& registry, uintptr_t address) {
  auto next = registry.upper_bound(address);
  if (next == registry.begin()) return false;
  const auto& [start, size] = *std::prev(next);
  // A zero-byte allocation still owns its (unique) start address.
  return address - start < std::max<size_t>(size, 1);
}

void* Memory::allocate(size_t nbytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (nbytes > stats_.total_bytes - stats_.allocated_bytes) {
    throw OutOfMemoryError("flex: out of device memory: tried to allocate " +
                           std::to_string(nbytes) + " bytes; " +
                           std::to_string(stats_.allocated_bytes) + " bytes allocated of " +
                           std::to_string(stats_.total_bytes) + " total");
  }
  // Reserve the budget, then allocate without the lock (large blocks are slow).
  stats_.allocated_bytes += nbytes;
  lock.unlock();
  void* ptr = DeviceArena::get(stats_.total_bytes).allocate(nbytes);
  lock.lock();
  if (!ptr) {
    stats_.allocated_bytes -= nbytes;
    throw OutOfMemoryError("flex: out of device memory: tried to allocate " +
                           std::to_string(nbytes) + " bytes; the host could not back it (" +
                           std::to_string(stats_.allocated_bytes) + " bytes allocated of " +
                           std::to_string(stats_.total_bytes) + " total)");
  }
  device_.emplace(reinterpret_cast<uintptr_t>(ptr), nbytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.num_allocs;
  return ptr;
}

void Memory::deallocate(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = device_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == device_.end()) {
      throw Error("flex: deallocate: " + hexPointer(ptr) +
                  " is not the start of a live device allocation");
    }
    stats_.allocated_bytes -= it->second;
    ++stats_.num_frees;
    device_.erase(it);
  }
  DeviceArena::get(stats_.total_bytes).release(ptr);
}

bool Memory::isDevicePtr(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return containsLocked(device_, reinterpret_cast<uintptr_t>(ptr));
}

MemoryStats Memory::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void* Memory::allocatePinned(size_t nbytes) {
  void* ptr = alignedBlock(nbytes);
  if (!ptr) {
    throw Error("flex: allocatePinned: the host could not allocate " + std::to_string(nbytes) +
                " bytes");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pinned_.emplace(reinterpret_cast<uintptr_t>(ptr), nbytes);
  return ptr;
}

void Memory::deallocatePinned(void* ptr) {
  if (!ptr) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pinned_.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
      throw Error("flex: deallocatePinned: " + hexPointer(ptr) +
                  " is not the start of a live pinned allocation");
    }
  }
  std::free(ptr);
}

bool Memory::isPinnedPtr(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return containsLocked(pinned_, reinterpret_cast<uintptr_t>(ptr));
}

bool Memory::isInsideOneAllocation(const void* ptr, size_t size) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto next = device_.upper_bound(address);
  if (next == device_.begin()) return false;
  const auto& [start, length] = *std::prev(next);
  return address - start <= length && size <= length - (address - start);
}

}  // namespace flex::detail
