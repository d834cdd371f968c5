// Wrappers for -Wl,--wrap=<mangled name>: references from other objects (the
// torch-spyre sources, the stress program) to these runtime functions land
// here, which audit the pool lock and forward to __real_<name>. The list of
// names is read from this file by run_sanitizers.sh (the WRAP lines).
#include "audit.hpp"

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include <flex/flex.hpp>

#include "runtime/stream.h"

namespace audit {
namespace {

std::atomic<uint64_t> g_calls{0};
std::atomic<uint64_t> g_violations{0};
std::atomic<uint64_t> g_creations{0};
std::atomic<uint64_t> g_creation_seq{0};
std::atomic<int64_t> g_slow_create_ms{0};
std::mutex g_mutex;
std::string g_first_violation;       // guarded by g_mutex
std::function<void()> g_create_hook;  // guarded by g_mutex

void check(const char* what) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  const auto held = spyre::detail::poolLockHeldByThisThread();
  if (held == spyre::detail::PoolLockHeld::None) {
    return;
  }
  if (g_violations.fetch_add(1) == 0) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_first_violation = std::string(what) + " under " +
                        (held == spyre::detail::PoolLockHeld::Unique ? "unique" : "shared") +
                        " pool lock";
  }
}

}  // namespace

uint64_t calls() { return g_calls.load(); }
uint64_t violations() { return g_violations.load(); }
std::string firstViolation() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_first_violation;
}
void setSlowCreate(std::chrono::milliseconds delay) { g_slow_create_ms.store(delay.count()); }
void setCreateHook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_create_hook = std::move(hook);
}
uint64_t creations() { return g_creations.load(); }
uint64_t creationSeq() { return g_creation_seq.load(); }

}  // namespace audit

using flex::RuntimeContext;
using flex::RuntimeEvent;
using flex::RuntimeStream;

// WRAP(mangled name, return type, (parameters), (arguments))
#define WRAP(sym, ret, params, args)                 \
  extern "C" ret __real_##sym params;                \
  extern "C" ret __wrap_##sym params {               \
    audit::check(#sym);                              \
    return __real_##sym args;                        \
  }

WRAP(_ZN4flex14RuntimeContext6createEi, RuntimeContext*, (int device), (device))
WRAP(_ZN4flex14RuntimeContext16getDefaultStreamEv, RuntimeStream*, (RuntimeContext* self), (self))
WRAP(_ZN4flex14RuntimeContext8allocateEm, void*, (RuntimeContext* self, unsigned long n), (self, n))
WRAP(_ZN4flex14RuntimeContext10deallocateEPv, void, (RuntimeContext* self, void* p), (self, p))
WRAP(_ZNK4flex14RuntimeContext14hasStreamErrorEv, bool, (const RuntimeContext* self), (self))
WRAP(_ZN4flex13RuntimeStream11synchronizeEv, void, (RuntimeStream* self), (self))
WRAP(_ZN4flex13RuntimeStream5queryEv, bool, (RuntimeStream* self), (self))
WRAP(_ZNK4flex13RuntimeStream13needsShutdownEv, bool, (const RuntimeStream* self), (self))
WRAP(_ZN4flex13RuntimeStream18launchOperationH2DEPKNS_9DmaParamsE, void,
     (RuntimeStream* self, const flex::DmaParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream18launchOperationD2HEPKNS_9DmaParamsE, void,
     (RuntimeStream* self, const flex::DmaParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream18launchOperationD2DEPKNS_9D2DParamsE, void,
     (RuntimeStream* self, const flex::D2DParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream22launchOperationComputeEPKNS_13ComputeParamsE, void,
     (RuntimeStream* self, const flex::ComputeParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream22launchOperationComputeEONS_13ComputeParamsE, void,
     (RuntimeStream* self, flex::ComputeParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream27launchOperationHostCallbackEPKNS_18HostCallbackParamsE, void,
     (RuntimeStream* self, const flex::HostCallbackParams* p), (self, p))
WRAP(_ZN4flex13RuntimeStream9fillAsyncEPKNS_16CompositeAddressEdNS_11DataFormatsEb, void,
     (RuntimeStream* self, const flex::CompositeAddress* a, double v, flex::DataFormats f, bool d),
     (self, a, v, f, d))
WRAP(_ZN4flex13RuntimeStream20launchOperationDelayENSt6chrono8durationIlSt5ratioILl1ELl1000000000EEEE,
     void, (RuntimeStream* self, std::chrono::nanoseconds d), (self, d))
WRAP(_ZN4flex12RuntimeEvent6recordEPNS_13RuntimeStreamE, void,
     (RuntimeEvent* self, RuntimeStream* s), (self, s))
WRAP(_ZN4flex12RuntimeEvent4waitEPNS_13RuntimeStreamE, void,
     (RuntimeEvent* self, RuntimeStream* s), (self, s))
WRAP(_ZNK4flex12RuntimeEvent11synchronizeEv, void, (const RuntimeEvent* self), (self))
WRAP(_ZNK4flex12RuntimeEvent5queryEv, bool, (const RuntimeEvent* self), (self))

// createStream is wrapped by hand: it also carries the slow-creation hooks.
// WRAP-BY-HAND(_ZN4flex14RuntimeContext12createStreamENS_21RuntimeStreamPriorityENS_17RuntimeStreamModeEb)
extern "C" RuntimeStream* __real__ZN4flex14RuntimeContext12createStreamENS_21RuntimeStreamPriorityENS_17RuntimeStreamModeEb(
    RuntimeContext* self, flex::RuntimeStreamPriority priority, flex::RuntimeStreamMode mode,
    bool track_hazards);
extern "C" RuntimeStream* __wrap__ZN4flex14RuntimeContext12createStreamENS_21RuntimeStreamPriorityENS_17RuntimeStreamModeEb(
    RuntimeContext* self, flex::RuntimeStreamPriority priority, flex::RuntimeStreamMode mode,
    bool track_hazards) {
  audit::check("RuntimeContext::createStream");
  audit::g_creations.fetch_add(1);
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(audit::g_mutex);
    hook = std::exchange(audit::g_create_hook, nullptr);
  }
  if (hook) {
    hook();
  }
  audit::g_creation_seq.fetch_add(1);  // odd: in progress
  if (const int64_t ms = audit::g_slow_create_ms.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  RuntimeStream* stream = __real__ZN4flex14RuntimeContext12createStreamENS_21RuntimeStreamPriorityENS_17RuntimeStreamModeEb(
      self, priority, mode, track_hazards);
  audit::g_creation_seq.fetch_add(1);
  return stream;
}
