// Device memory budget, statistics, pointer queries, pinned host memory.
#include <cstdint>
#include <set>
#include <vector>

#include "util.hpp"

using flex::MemoryStats;
using flex::RuntimeContext;

TEST(memory_allocate_tracks_stats_and_aligns) {
  RuntimeContext* context = util::context();
  void* a = context->allocate(100);
  void* b = context->allocate(1000);
  CHECK(reinterpret_cast<uintptr_t>(a) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(b) % 64 == 0);
  MemoryStats stats = context->memoryStats();
  CHECK_EQ(stats.allocated_bytes, 1100u);
  CHECK_EQ(stats.num_allocs, 2u);
  context->deallocate(b);
  stats = context->memoryStats();
  CHECK_EQ(stats.allocated_bytes, 100u);
  CHECK_EQ(stats.peak_allocated_bytes, 1100u);
  CHECK_EQ(stats.num_frees, 1u);
  CHECK_EQ(stats.total_bytes, size_t{16} << 30);
  context->deallocate(a);
  CHECK_EQ(context->memoryStats().allocated_bytes, 0u);
}

TEST(memory_zero_size_allocations_are_unique_and_non_null) {
  RuntimeContext* context = util::context();
  std::set<void*> seen;
  for (int i = 0; i < 10; ++i) {
    void* ptr = context->allocate(0);
    CHECK(ptr != nullptr);
    CHECK(context->isDevicePtr(ptr));
    seen.insert(ptr);
  }
  CHECK_EQ(seen.size(), 10u);
  CHECK_EQ(context->memoryStats().allocated_bytes, 0u);
  for (void* ptr : seen) context->deallocate(ptr);
}

TEST(memory_budget_raises_out_of_memory) {
  util::setEnv("FLEX_STUB_MEMORY_BYTES", "1000");
  RuntimeContext* context = util::context();
  void* a = context->allocate(600);
  CHECK_THROWS_MSG(context->allocate(500),
                   "flex: out of device memory: tried to allocate 500 bytes; 600 bytes allocated "
                   "of 1000 total");
  bool typed = false;
  try {
    context->allocate(401);
  } catch (const flex::OutOfMemoryError&) {
    typed = true;
  }
  CHECK(typed);
  void* b = context->allocate(400);
  CHECK_EQ(context->memoryStats().allocated_bytes, 1000u);
  context->deallocate(a);
  context->deallocate(b);
  void* c = context->allocate(1000);
  context->deallocate(c);
}

TEST(memory_budget_is_not_real_memory) {
  util::setEnv("FLEX_STUB_MEMORY_BYTES", "1099511627776");  // 1 TiB of budget
  RuntimeContext* context = util::context();
  CHECK_EQ(context->memoryStats().total_bytes, size_t{1} << 40);
  void* ptr = context->allocate(1 << 20);
  context->deallocate(ptr);
}

TEST(memory_deallocate_unknown_pointer_throws) {
  RuntimeContext* context = util::context();
  int local = 0;
  CHECK_THROWS_MSG(context->deallocate(&local), "is not the start of a live device allocation");
  char* ptr = static_cast<char*>(context->allocate(64));
  CHECK_THROWS_MSG(context->deallocate(ptr + 8), "is not the start of a live device allocation");
  context->deallocate(ptr);
  CHECK_THROWS_MSG(context->deallocate(ptr), "is not the start of a live device allocation");
  context->deallocate(nullptr);
}

TEST(memory_is_device_ptr_covers_interior_pointers) {
  RuntimeContext* context = util::context();
  char* ptr = static_cast<char*>(context->allocate(100));
  CHECK(context->isDevicePtr(ptr));
  CHECK(context->isDevicePtr(ptr + 99));
  CHECK(!context->isDevicePtr(ptr + 100));
  CHECK(!context->isDevicePtr(ptr - 1));
  int local = 0;
  CHECK(!context->isDevicePtr(&local));
  CHECK(!context->isDevicePtr(nullptr));
  context->deallocate(ptr);
  CHECK(!context->isDevicePtr(ptr));
}

TEST(memory_pinned_host_allocations) {
  RuntimeContext* context = util::context();
  char* pinned = static_cast<char*>(context->allocatePinned(256));
  CHECK(pinned != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(pinned) % 64 == 0);
  CHECK(context->isPinnedPtr(pinned));
  CHECK(context->isPinnedPtr(pinned + 255));
  CHECK(!context->isPinnedPtr(pinned + 256));
  CHECK(!context->isDevicePtr(pinned));
  pinned[0] = 1;  // host memory: the host may touch it
  CHECK_EQ(context->memoryStats().allocated_bytes, 0u);
  void* empty = context->allocatePinned(0);
  CHECK(empty != nullptr && empty != pinned);
  CHECK(context->isPinnedPtr(empty));
  int local = 0;
  CHECK_THROWS_MSG(context->deallocatePinned(&local),
                   "is not the start of a live pinned allocation");
  context->deallocatePinned(pinned);
  context->deallocatePinned(empty);
  CHECK(!context->isPinnedPtr(pinned));
}

TEST(memory_concurrent_allocations_are_consistent) {
  RuntimeContext* context = util::context();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([context] {
      for (int i = 0; i < 500; ++i) {
        void* ptr = context->allocate(64 + i);
        context->deallocate(ptr);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  const MemoryStats stats = context->memoryStats();
  CHECK_EQ(stats.allocated_bytes, 0u);
  CHECK_EQ(stats.num_allocs, 4000u);
  CHECK_EQ(stats.num_frees, 4000u);
}

TEST(memory_executor_address_is_the_same_bytes_read_write) {
  RuntimeContext* context = util::context();
  char* dev = static_cast<char*>(context->allocate(256));
  char* view = static_cast<char*>(flex::executorAddress(dev));
  CHECK(view != dev);
  CHECK_EQ(static_cast<char*>(flex::executorAddress(dev + 100)), view + 100);
  view[100] = 42;  // an executor's write
  char back = 0;
  flex::CompositeAddress address(dev, 256);
  flex::DmaParams d2h(&back, 1, false, &address);
  d2h.dev_offset = 100;
  flex::RuntimeStream* stream = context->getDefaultStream();
  stream->launchOperationD2H(&d2h);
  stream->synchronize();
  CHECK_EQ(back, 42);
  int local = 0;  // not device memory: unchanged
  CHECK_EQ(flex::executorAddress(&local), static_cast<void*>(&local));
  CHECK(flex::executorAddress(nullptr) == nullptr);
  context->deallocate(dev);
}

TEST(memory_freed_pages_go_back_to_the_os) {
  RuntimeContext* context = util::context();
  constexpr size_t kBytes = 1 << 20;
  char* dev = static_cast<char*>(context->allocate(kBytes));
  char* view = static_cast<char*>(flex::executorAddress(dev));
  for (size_t i = 0; i < kBytes; ++i) view[i] = 7;
  context->deallocate(dev);
  // The whole pages of the freed range were punched out: they read as zeros.
  size_t nonzero = 0;
  for (size_t i = 8192; i < kBytes - 8192; ++i) nonzero += view[i] != 0;
  CHECK_EQ(nonzero, 0u);
}
