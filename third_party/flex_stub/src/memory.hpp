// Device memory budget and the registry of live device and pinned allocations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#include "flex/flex.hpp"

namespace flex::detail {

class Memory {
 public:
  explicit Memory(size_t total_bytes);

  void* allocate(size_t nbytes);
  void deallocate(void* ptr);
  bool isDevicePtr(const void* ptr) const;
  MemoryStats stats() const;

  void* allocatePinned(size_t nbytes);
  void deallocatePinned(void* ptr);
  bool isPinnedPtr(const void* ptr) const;

  // True when [ptr, ptr + size) lies inside one live device allocation.
  bool isInsideOneAllocation(const void* ptr, size_t size) const;

  // Held across fork() so the child inherits a consistent registry.
  void lockForFork() { mutex_.lock(); }
  void unlockAfterFork() { mutex_.unlock(); }

 private:
  using Registry = std::map<uintptr_t, size_t>;  // start -> requested size
  static bool containsLocked(const Registry& registry, uintptr_t address);

  mutable std::mutex mutex_;
  Registry device_;
  Registry pinned_;
  MemoryStats stats_;
};

}  // namespace flex::detail
