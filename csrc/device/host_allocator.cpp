// The pinned host allocator: the at::HostAllocator registered for
// PrivateUse1, ATen's caching host allocator over the runtime's pinned memory.
#include "device/allocator.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <shared_mutex>

#include <ATen/core/CachingHostAllocator.h>
#include <c10/util/Exception.h>

#include "device/fork_gate.h"
#include "runtime/runtime.h"
#include "runtime/sanitizer.h"

namespace spyre {
namespace {

// Pinned host memory: ATen's caching host allocator over the runtime's pinned
// blocks. A block used by device work (record_event) goes back to the free
// list only when events recorded at free time on those streams completed.
using HostEvent = std::unique_ptr<flex::RuntimeEvent>;

struct PinnedBlockPools final : public at::CachingHostAllocatorImpl<c10::Stream, HostEvent> {
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    const auto start = std::chrono::steady_clock::now();
    *ptr = runtimeContext()->allocatePinned(size);
    recordMicroseconds(stats_.host_alloc_time, start);
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    const auto start = std::chrono::steady_clock::now();
    try {
      if (flex::RuntimeContext* context = flex::RuntimeContext::get()) {
        context->deallocatePinned(block->ptr_);
      }
    } catch (...) {
      // A forked child or a torn-down runtime: the memory goes with the process.
    }
    recordMicroseconds(stats_.host_free_time, start);
  }

  void recordMicroseconds(c10::CachingAllocator::DurationStat& stat,
                          std::chrono::steady_clock::time_point start) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start);
    std::lock_guard<std::mutex> lock(stats_.timing_mutex_);
    stat.increase(elapsed.count());
  }

  // Runs in a deleter: must not throw. An event that cannot be recorded (the
  // stream failed and dropped its work, or the runtime is gone) stays
  // unrecorded, which counts as complete.
  void record_stream(std::optional<std::vector<HostEvent>>& events, c10::Stream stream) override {
    auto event = std::make_unique<flex::RuntimeEvent>();
    try {
      event->record(SpyreStream(stream).resolveRuntimeHandle());
    } catch (...) {
    }
    events->push_back(std::move(event));
  }

  // In a forked child the runtime raises for every event: none of the
  // parent's device work can touch the child's copy of a block.
  bool query_event(HostEvent& event) override {
    try {
      return event->query();
    } catch (const flex::Error&) {
      return true;
    }
  }

  // ATen's background thread would run outside the fork gate (below).
  bool pinned_use_background_threads() override {
    return false;
  }

  c10::Stream get_current_stream() const override {
    return getCurrentStream(-1);
  }

  // ATen asks only while a capture allocates to one of this allocator's
  // private pools (begin_allocate_to_pool), which spyre's graphs never start:
  // a capture refuses copies from and to host memory (runtime/capture.h), so
  // no pinned block belongs to a graph.
  bool stream_is_capturing(c10::Stream /*stream*/) const override {
    return false;
  }
};

void freePinnedBlock(void* context);

// ATen's pools have private locks we cannot take across fork(). Every entry
// point holds the gate shared instead; fork() takes it exclusively, so no
// thread is inside the pools (holding one of their locks) when the child is
// made, and the child can free the pinned blocks it inherited.
struct SpyreHostAllocator final
    : public at::CachingHostAllocatorInterface<PinnedBlockPools, freePinnedBlock> {
  using Base = at::CachingHostAllocatorInterface<PinnedBlockPools, freePinnedBlock>;
  using Gate = std::shared_lock<std::shared_mutex>;

  at::DataPtr allocate(size_t size) override {
    Gate gate(fork_gate);
    at::DataPtr block = Base::allocate(size);
    // The copies the block waited for ran: the sanitizer forgets their host bytes.
    if (sanitizer::hostPending()) sanitizer::onHostBlockAllocated(block.get(), size);
    return block;
  }
  void free(void* context) {
    Gate gate(fork_gate);
    Base::free(context);
  }
  bool record_event(void* ptr, void* context, c10::Stream stream) override {
    Gate gate(fork_gate);
    return Base::record_event(ptr, context, stream);
  }
  void empty_cache() override {
    Gate gate(fork_gate);
    Base::empty_cache();
  }
  at::HostStats get_stats() override {
    Gate gate(fork_gate);
    return Base::get_stats();
  }
  void reset_accumulated_stats() override {
    Gate gate(fork_gate);
    Base::reset_accumulated_stats();
  }
  void reset_peak_stats() override {
    Gate gate(fork_gate);
    Base::reset_peak_stats();
  }
  void begin_allocate_to_pool(c10::MempoolId_t pool_id,
                              std::function<bool(c10::Stream)> filter) override {
    Gate gate(fork_gate);
    Base::begin_allocate_to_pool(pool_id, std::move(filter));
  }
  void end_allocate_to_pool(c10::MempoolId_t pool_id) override {
    Gate gate(fork_gate);
    Base::end_allocate_to_pool(pool_id);
  }
  void release_pool(c10::MempoolId_t pool_id) override {
    Gate gate(fork_gate);
    Base::release_pool(pool_id);
  }

  std::shared_mutex fork_gate;
};

SpyreHostAllocator& theHostAllocator() {
  static auto* allocator = new SpyreHostAllocator();
  return *allocator;
}

void freePinnedBlock(void* context) {
  theHostAllocator().free(context);
}

// Registered when _C is loaded. Without a host allocator,
// torch.accelerator.empty_host_cache() dereferences null on torch 2.13.
const bool registered = [] {
  at::setHostAllocator(c10::DeviceType::PrivateUse1, &theHostAllocator());
  return true;
}();

}  // namespace

void fork_gate::lockHostAllocator() {
  theHostAllocator().fork_gate.lock();
}

void fork_gate::unlockHostAllocatorInParent() {
  theHostAllocator().fork_gate.unlock();
}

// glibc's rwlock unlock tells a writer by its thread id, which the child's
// thread does not have: the child makes a new (unlocked) gate instead.
void fork_gate::resetHostAllocatorInChild() {
  new (&theHostAllocator().fork_gate) std::shared_mutex();
}

bool recordPinnedUse(const c10::DataPtr& data_ptr, const SpyreStream& stream) {
  return theHostAllocator().record_event(data_ptr.get(), data_ptr.get_context(), stream);
}

c10::Allocator* pinnedHostAllocator() {
  return &theHostAllocator();
}

bool isPinnedPtr(const void* ptr) {
  flex::RuntimeContext* context = flex::RuntimeContext::get();
  return context != nullptr && context->isPinnedPtr(ptr);
}
}  // namespace spyre
