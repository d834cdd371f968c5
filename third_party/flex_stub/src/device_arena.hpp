// Where device memory lives: one reserved arena of shared pages (a memfd)
// mapped twice. Device addresses -- what allocate() returns and tensors carry --
// fall in a no-access mapping, so host code reading or writing through one
// faults (device_fault.cpp reports it). The runtime's own executors reach the
// same bytes through a read-write mapping a constant offset away.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace flex::detail {

class DeviceArena {
 public:
  // The process's arena, reserved (and the fault handler installed) on first
  // use, sized for a device of `budget` bytes (the first context's).
  static DeviceArena& get(size_t budget);
  // The arena if it was reserved, else nullptr.
  static DeviceArena* ifReserved();

  // A 64-byte aligned device address of at least `nbytes` (a unique one for 0),
  // or nullptr when the arena has no free range that large.
  void* allocate(size_t nbytes);
  // Returns the range to the arena; its whole pages go back to the OS.
  void release(void* device_ptr);

  // The live allocation holding `address` (start and requested size), for the
  // fault report, from a signal handler: tries the lock once (a handler must
  // not wait: the holder may be the interrupted thread, or stopped) and never
  // allocates. Busy when the lock was held.
  enum class Lookup { Found, None, Busy };
  Lookup allocationAtForFault(uintptr_t address, uintptr_t* start, size_t* size);

  // Tests of the fault report (flex/testing.hpp): the registry's lock held,
  // and shared memory that can back no page any more (every access through
  // the executors' view then raises SIGBUS, as when the host is out of it).
  void lockForTest() { mutex_.lock(); }
  void unlockForTest() { mutex_.unlock(); }
  void exhaustBackingForTest();

  // fork(): the registry is copied consistent. A child shares the parent's
  // pages (MAP_SHARED), so its frees must not hand them back to the OS.
  void lockForFork() { mutex_.lock(); }
  void unlockAfterFork(bool child);

 private:
  explicit DeviceArena(size_t budget);

  std::mutex mutex_;
  std::map<size_t, size_t> free_by_offset_;          // offset -> length
  std::set<std::pair<size_t, size_t>> free_by_size_;  // (length, offset): best fit
  std::map<uintptr_t, std::pair<size_t, size_t>> live_;  // start -> (requested, reserved)
  bool punch_holes_ = true;
  int fd_ = -1;
  size_t bytes_ = 0;  // of each mapping
};

// The arena's bounds; zero before it is reserved. Read by the translation and
// the fault handler without locks: written once, before any device address exists.
extern uintptr_t g_arena_base;
extern size_t g_arena_bytes;
extern ptrdiff_t g_executor_offset;

// Installs the SIGSEGV/SIGBUS handler that reports host accesses to device memory.
void installDeviceFaultHandler();

}  // namespace flex::detail
