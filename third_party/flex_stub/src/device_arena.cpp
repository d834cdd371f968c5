// The device arena: reservation, a best-fit allocator over it, and returning
// freed pages to the OS.
#include "device_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "flex/flex.hpp"

namespace flex::detail {

uintptr_t g_arena_base = 0;
size_t g_arena_bytes = 0;
ptrdiff_t g_executor_offset = 0;

namespace {

// Address space, not memory: pages are real only once an executor touches
// them, and FLEX_STUB_MEMORY_BYTES caps what is allocated. Twice the budget
// leaves room for fragmentation; an allocation the arena cannot place fails
// like one the host cannot back. Where the address space is smaller (under
// ThreadSanitizer), the reservation halves until it fits.
constexpr size_t kMinArenaBytes = size_t{1} << 30;
constexpr size_t kMaxArenaBytes = size_t{1} << 40;
constexpr size_t kAlignment = 64;
constexpr size_t kPageBytes = 4096;

[[noreturn]] void fail(const char* what) {
  throw Error(std::string("flex: could not reserve device memory (") + what +
              "): " + std::strerror(errno));
}

std::atomic<DeviceArena*> g_arena{nullptr};

}  // namespace

DeviceArena& DeviceArena::get(size_t budget) {
  if (DeviceArena* arena = g_arena.load(std::memory_order_acquire)) return *arena;
  static std::mutex creation;
  std::lock_guard<std::mutex> lock(creation);
  if (g_arena.load(std::memory_order_relaxed) == nullptr) {
    g_arena.store(new DeviceArena(budget), std::memory_order_release);  // never destroyed
  }
  return *g_arena.load(std::memory_order_relaxed);
}

DeviceArena* DeviceArena::ifReserved() { return g_arena.load(std::memory_order_acquire); }

DeviceArena::DeviceArena(size_t budget) {
  fd_ = memfd_create("spyre-device-memory", MFD_CLOEXEC);
  if (fd_ < 0) fail("memfd_create");
  bytes_ = std::min(std::max(budget > kMaxArenaBytes / 2 ? kMaxArenaBytes : 2 * budget,
                             kMinArenaBytes),
                    kMaxArenaBytes);
  bytes_ = (bytes_ + kPageBytes - 1) / kPageBytes * kPageBytes;
  // One reservation for both mappings, so the offset between them is constant.
  void* reserved = MAP_FAILED;
  for (;;) {
    reserved = mmap(nullptr, 2 * bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
    if (reserved != MAP_FAILED || bytes_ / 2 < kMinArenaBytes) break;
    bytes_ /= 2;
  }
  if (reserved == MAP_FAILED) fail("mmap reserve");
  if (ftruncate(fd_, static_cast<off_t>(bytes_)) != 0) fail("ftruncate");
  char* device = static_cast<char*>(reserved);
  char* executor = device + bytes_;
  if (mmap(device, bytes_, PROT_NONE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd_, 0) ==
      MAP_FAILED) {
    fail("mmap device view");
  }
  if (mmap(executor, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd_,
           0) == MAP_FAILED) {
    fail("mmap executor view");
  }
  free_by_offset_.emplace(0, bytes_);
  free_by_size_.emplace(bytes_, 0);
  g_arena_base = reinterpret_cast<uintptr_t>(device);
  g_arena_bytes = bytes_;
  g_executor_offset = static_cast<ptrdiff_t>(bytes_);
  installDeviceFaultHandler();
}

void* DeviceArena::allocate(size_t nbytes) {
  if (nbytes > bytes_) return nullptr;
  const size_t reserved = std::max<size_t>((nbytes + kAlignment - 1) / kAlignment, 1) * kAlignment;
  std::lock_guard<std::mutex> lock(mutex_);
  auto fit = free_by_size_.lower_bound({reserved, 0});
  if (fit == free_by_size_.end()) return nullptr;
  const auto [length, offset] = *fit;
  free_by_size_.erase(fit);
  free_by_offset_.erase(offset);
  if (length > reserved) {
    free_by_offset_.emplace(offset + reserved, length - reserved);
    free_by_size_.emplace(length - reserved, offset + reserved);
  }
  const uintptr_t start = g_arena_base + offset;
  live_.emplace(start, std::make_pair(nbytes, reserved));
  return reinterpret_cast<void*>(start);
}

void DeviceArena::release(void* device_ptr) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(device_ptr));
  if (it == live_.end()) return;  // the caller checked its own registry
  size_t offset = it->first - g_arena_base;
  size_t length = it->second.second;
  live_.erase(it);
  // Coalesce with the free neighbours.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + length) {
    free_by_size_.erase({next->second, next->first});
    length += next->second;
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      free_by_size_.erase({prev->second, prev->first});
      offset = prev->first;
      length += prev->second;
      free_by_offset_.erase(prev);
    }
  }
  free_by_offset_.emplace(offset, length);
  free_by_size_.emplace(length, offset);
  // The whole pages of the free range go back to the OS (and read as zeros).
  const size_t first_page = (offset + kPageBytes - 1) / kPageBytes * kPageBytes;
  const size_t end_page = (offset + length) / kPageBytes * kPageBytes;
  if (punch_holes_ && end_page > first_page) {
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first_page),
              static_cast<off_t>(end_page - first_page));
  }
}

DeviceArena::Lookup DeviceArena::allocationAtForFault(uintptr_t address, uintptr_t* start,
                                                      size_t* size) {
  if (!mutex_.try_lock()) return Lookup::Busy;
  Lookup found = Lookup::None;
  auto next = live_.upper_bound(address);
  if (next != live_.begin()) {
    const auto& [begin, sizes] = *std::prev(next);
    if (address - begin < sizes.second) {
      *start = begin;
      *size = sizes.first;
      found = Lookup::Found;
    }
  }
  mutex_.unlock();
  return found;
}

void DeviceArena::exhaustBackingForTest() {
  std::lock_guard<std::mutex> lock(mutex_);
  punch_holes_ = false;
  if (ftruncate(fd_, 0) != 0) fail("ftruncate");
}

void DeviceArena::unlockAfterFork(bool child) {
  if (child) punch_holes_ = false;
  mutex_.unlock();
}

}  // namespace flex::detail

namespace flex {

void* executorAddress(const void* device_ptr) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(device_ptr);
  if (address - detail::g_arena_base >= detail::g_arena_bytes) return const_cast<void*>(device_ptr);
  return reinterpret_cast<void*>(address + detail::g_executor_offset);
}

}  // namespace flex
