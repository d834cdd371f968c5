// Process exit and fork.
//
// Shutdown order, run by the destructor of `g_shutdown_guard` (registered when
// the library is loaded, so it runs after the static destructors of everything
// loaded later, such as the torch extension that links this library):
//   1. g_shut_down is set: launches throw "flex runtime is shut down", and
//      synchronize()/query() stop waiting.
//   2. The scheduler stops: the operation running on each engine finishes
//      (delays and DMA pacing are cut short; parked waits hold no engine),
//      then every engine thread is joined, then the DMA workers.
//   3. Queued operations are abandoned (counted complete; event records among
//      them complete so host waits return).
//   4. The trace requested by FLEX_STUB_TRACE is written.
// The context and its memory stay alive: deallocate() keeps working for
// static destructors that run after this one.
//
// Fork: the child of a process with a context has none of its engine threads,
// so launches, synchronization and create() throw there. Memory calls keep
// working: the registry lock is held across fork() so the child's copy is
// consistent.
#include <pthread.h>

#include <cstdio>

#include "context_impl.hpp"
#include "device_arena.hpp"
#include "lifecycle.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex::detail {

std::atomic<bool> g_shut_down{false};
std::atomic<bool> g_forked_child{false};

void throwForkedChild() {
  throw Error("flex: the runtime cannot be used in a forked child process");
}

void throwShutDown() { throw Error("flex runtime is shut down"); }

namespace {

void shutdownRuntime() {
  if (g_forked_child.load()) return;  // the engines to stop live in the parent
  g_shut_down.store(true);
  RuntimeContext* context = RuntimeContext::get();
  if (!context) return;
  RuntimeContext::Impl& impl = *context->impl();
  impl.scheduler.stop();
  {
    std::lock_guard<std::mutex> lock(impl.streams_mutex);
    for (auto& stream : impl.streams) stream->impl()->abandon();
  }
  if (!impl.trace_path.empty() && trace::chromeTraceEnabled()) {
    try {
      trace::stopAndWrite(impl.trace_path, impl.card);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());  // nowhere to throw to at exit
    }
  }
}

void beforeFork() {
  contextCreationMutex().lock();
  if (RuntimeContext* context = RuntimeContext::get()) {
    context->impl()->memory.lockForFork();
    if (DeviceArena* arena = DeviceArena::ifReserved()) arena->lockForFork();
  }
}

void afterForkInParent() {
  if (RuntimeContext* context = RuntimeContext::get()) {
    if (DeviceArena* arena = DeviceArena::ifReserved()) arena->unlockAfterFork(/*child=*/false);
    context->impl()->memory.unlockAfterFork();
  }
  contextCreationMutex().unlock();
}

void afterForkInChild() {
  if (RuntimeContext* context = RuntimeContext::get()) {
    if (DeviceArena* arena = DeviceArena::ifReserved()) arena->unlockAfterFork(/*child=*/true);
    context->impl()->memory.unlockAfterFork();
    g_forked_child.store(true);
  }
  contextCreationMutex().unlock();
}

struct ShutdownGuard {
  ShutdownGuard() { pthread_atfork(beforeFork, afterForkInParent, afterForkInChild); }
  ~ShutdownGuard() { shutdownRuntime(); }
};

ShutdownGuard g_shutdown_guard;

}  // namespace
}  // namespace flex::detail
