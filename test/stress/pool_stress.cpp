// Concurrency stress of the stream pool and SpyreStream against the flex stub,
// built without Python (c10 headers + libc10) by run_sanitizers.sh, plain and
// under ThreadSanitizer / AddressSanitizer+UBSan.
//
//   pool_stress [--threads 8] [--ops 100000] [--seed 1]   stress, then faults
//   pool_stress --mode lock-hold [--slow-create-ms 20] [--readers 4]
//   pool_stress --mode exit-queued | exit-thread | exit-during [--ops N]
//   pool_stress --mode capture-join [--ops 2000]
//   pool_stress --mode hazard-order [--ops 2000]
//   pool_stress --mode peer-windows [--threads 8] [--ops 2000]
//
// Every check counts a failure instead of aborting; the program prints a
// summary and exits 1 if any check failed or any runtime call ran under the
// pool lock (audit.cpp), 0 otherwise. Sanitizers exit 66 on a finding.
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>
#include <flex/flex.hpp>
#include <flex/testing.hpp>

#include "audit.hpp"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/runtime.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"
#include "stress_util.hpp"

using spyre::SpyreStream;
using stress::Rng;

namespace {

constexpr int kIds = spyre::kMaxStreamIds;  // 73: ids 0..72 (pool and host-compute)
constexpr size_t kWords = 64;                    // int32 words per copy buffer

using Clock = std::chrono::steady_clock;

int g_threads = 8;
// The first handle each id resolved to: ids must never be remapped.
std::array<std::atomic<flex::RuntimeStream*>, kIds> g_handles{};
// g_exec[t][id]: sequence number of thread t's last callback that ran on
// stream id. Plain memory, written only by callbacks of that stream (which the
// runtime runs one at a time, in order) and read by thread t after a sync: a
// missing happens-before edge is a TSAN report, a reordering a failed check.
// Leaked: exit-during leaves callbacks running while static destructors run.
std::vector<std::array<uint64_t, kIds>>& g_exec = *new std::vector<std::array<uint64_t, kIds>>();
std::atomic<uint64_t> g_order_violations{0};
std::atomic<uint64_t> g_event_violations{0};
std::atomic<uint64_t> g_expected_errors{0};  // bad inputs rejected as expected
std::atomic<bool> g_exiting{false};           // exit-during: stop checking

SpyreStream streamWithId(c10::StreamId id, c10::DeviceIndex device = 0) {
  return SpyreStream(c10::Stream(c10::Stream::UNSAFE,
                                 c10::Device(c10::DeviceType::PrivateUse1, device), id));
}

bool contains(const std::exception& e, const std::string& text) {
  return std::string(e.what()).find(text) != std::string::npos;
}

// Remember the handle of `stream`; it must equal every earlier resolution.
void noteHandle(const SpyreStream& stream) {
  flex::RuntimeStream* handle = stream.resolveRuntimeHandle();
  flex::RuntimeStream* expected = nullptr;
  if (!g_handles[stream.id()].compare_exchange_strong(expected, handle)) {
    STRESS_CHECK(expected == handle, "id " + std::to_string(stream.id()) + " was remapped");
  }
}

class Worker {
 public:
  Worker(int tid, SpyreStream priv, const std::vector<c10::StreamId>& private_ids, uint64_t seed)
      : tid_(tid), rng_(seed * 1000 + tid), priv_(priv), private_ids_(private_ids),
        shared_(spyre::getDefaultStream()) {
    flex::RuntimeContext* context = spyre::runtimeContext();
    dev_ = context->allocate(kWords * 4);
    dev2_ = context->allocate(kWords * 4);
  }
  ~Worker() {
    flex::RuntimeContext* context = spyre::runtimeContext();
    context->deallocate(dev_);
    context->deallocate(dev2_);
  }

  void run(int64_t ops) {
    for (int64_t i = 0; i < ops; ++i) {
      if (g_exiting.load(std::memory_order_relaxed)) {
        try {
          step();
        } catch (...) {
          // exit-during: the runtime is shutting down under us; only a crash counts.
        }
        continue;
      }
      step();
    }
  }

  // Faults: the next operation on this thread's private stream fails; the
  // failure is reported once (synchronize() on even threads, query() on odd),
  // the stream stays failed, and other streams keep working.
  void faults() {
    const std::string message = "stress fault on thread " + std::to_string(tid_);
    // Gated, so both launches are queued before the fault can latch the stream.
    flex::test::Gate gate;
    gate.enqueueOn(priv_.resolveRuntimeHandle());
    while (gate.blockedStreams() < 1) std::this_thread::yield();
    flex::test::injectFault(priv_.resolveRuntimeHandle(), message);
    auto ran = std::make_shared<std::atomic<int>>(0);
    priv_.launchHostCallback([ran] { ++*ran; }, "after-fault");
    priv_.launchCompute([ran] { ++*ran; }, "after-fault");
    gate.release();
    int reports = 0;
    if (tid_ % 2 == 0) {
      for (int i = 0; i < 3; ++i) {
        try {
          priv_.synchronize();
        } catch (const std::exception& e) {
          ++reports;
          STRESS_CHECK(std::string(e.what()) == message, "got '" + std::string(e.what()) + "'");
        }
      }
    } else {
      bool idle = false;
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (!idle && Clock::now() < deadline) {
        try {
          idle = priv_.query();
        } catch (const std::exception& e) {
          ++reports;
          STRESS_CHECK(std::string(e.what()) == message, "got '" + std::string(e.what()) + "'");
        }
        if (!idle) std::this_thread::yield();
      }
      STRESS_CHECK(idle, "faulted stream never became idle");
    }
    STRESS_CHECK(reports == 1, "fault reported " + std::to_string(reports) + " times");
    STRESS_CHECK(ran->load() == 0, "work behind the fault ran");
    STRESS_CHECK(priv_.getError() == spyre::SpyreStreamError::Shutdown, "stream not latched");
    STRESS_CHECK(spyre::SpyreStreamGetError(priv_) == spyre::SpyreStreamError::Shutdown, "");
    try {
      priv_.launchDelay(0);
      STRESS_CHECK(false, "launch onto a failed stream succeeded");
    } catch (const std::exception& e) {
      STRESS_CHECK(std::string(e.what()) ==
                       "Cannot schedule operation on stream in error state: " + message,
                   "got '" + std::string(e.what()) + "'");
    }
    // Healthy streams: the default stream and a high-priority pool stream.
    for (const SpyreStream& s : {shared_, spyre::getStreamFromPool(-1)}) {
      for (int i = 0; i < 10; ++i) launchSequenced(s, i % 2 == 0);
      s.synchronize();
      checkDrained(s.id());
      STRESS_CHECK(s.getError() == spyre::SpyreStreamError::Success, "healthy stream latched");
    }
  }

  // All of this thread's callbacks on `id` have run (after a sync covering them).
  void checkDrained(c10::StreamId id) {
    STRESS_CHECK(g_exec[tid_][id] == launched_[id],
                 "thread " + std::to_string(tid_) + " stream " + std::to_string(id) + ": ran " +
                     std::to_string(g_exec[tid_][id]) + " of " + std::to_string(launched_[id]));
  }
  void checkAllDrained() {
    for (int id = 0; id < kIds; ++id) checkDrained(id);
  }

 private:
  void step() {
    const uint64_t r = rng_.below(100);
    if (r < 10) {
      handOut();
    } else if (r < 25) {
      resolve();
    } else if (r < 38) {
      switchCurrentStream();
    } else if (r < 48) {
      queryOrSynchronize();
    } else if (r < 49) {
      spyre::synchronizeDeviceOrThrow(-1);
      checkAllDrained();
    } else if (r < 57) {
      eventRoundTrip();
    } else {
      launch();
    }
  }

  bool isOthersPrivate(c10::StreamId id) const {
    for (c10::StreamId p : private_ids_) {
      if (p == id && id != priv_.id()) return true;
    }
    return false;
  }

  // A stream other threads launch onto too: the default stream or the last
  // pool hand-out (unless that is another thread's private stream).
  SpyreStream sharedTarget() {
    if (rng_.below(2) == 0 && !isOthersPrivate(last_handed_.id())) return last_handed_;
    return shared_;
  }

  void handOut() {
    static constexpr int kPriorities[] = {0, 1, 7, -1, -3};
    const uint64_t pick = rng_.below(6);
    if (pick == 5) {  // a host-compute stream, round robin
      SpyreStream s = spyre::getHostComputeStream(-1);
      const int first = spyre::kFirstHostComputeStreamId;
      STRESS_CHECK(s.id() >= first && s.id() < first + spyre::hostComputeStreamCount() &&
                       s.priority() == 0,
                   "host-compute hand-out got id " + std::to_string(s.id()));
      noteHandle(s);
      last_handed_ = s;
      return;
    }
    const int priority = kPriorities[pick];
    SpyreStream s = spyre::getStreamFromPool(priority);
    if (priority < 0) {
      STRESS_CHECK(s.id() >= 33 && s.id() <= 64 && s.priority() == -1,
                   "high-priority hand-out got id " + std::to_string(s.id()));
    } else {
      STRESS_CHECK(s.id() >= 1 && s.id() <= 32 && s.priority() == 0,
                   "low-priority hand-out got id " + std::to_string(s.id()));
    }
    noteHandle(s);
    last_handed_ = s;
  }

  void resolve() {
    const uint64_t r = rng_.below(128);
    if (r == 0 || r == 1) {
      // Ids the pool never hands out.
      const c10::StreamId id = r == 0 ? kIds + static_cast<c10::StreamId>(rng_.below(1000))
                                      : -1 - static_cast<c10::StreamId>(rng_.below(100));
      expectError([&] { streamWithId(id).resolveRuntimeHandle(); },
                  "SpyreStream: no flex handle for stream id " + std::to_string(id) + " on spyre:0");
      return;
    }
    if (r == 2) {
      expectError([] { streamWithId(1, 1).resolveRuntimeHandle(); },
                  "Only one Spyre device per process is supported: this process is bound to "
                  "spyre:0 but spyre:1 was requested");
      return;
    }
    if (r == 3) {
      expectError([] { SpyreStream(c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU))); },
                  "SpyreStream requires a spyre (PrivateUse1) stream, got a stream of device "
                  "type cpu");
      return;
    }
    const c10::StreamId id = static_cast<c10::StreamId>(rng_.below(kIds));
    flex::RuntimeStream* known = g_handles[id].load();
    try {
      noteHandle(streamWithId(id));
    } catch (const c10::Error& e) {
      // Unmapped so far: fine, unless this thread already saw it resolve.
      STRESS_CHECK(known == nullptr, "mapped id " + std::to_string(id) + " failed to resolve");
      STRESS_CHECK(contains(e, "no flex handle for stream id " + std::to_string(id)), e.what());
    }
  }

  void switchCurrentStream() {
    const uint64_t r = rng_.below(3);
    const SpyreStream s = r == 0 ? priv_ : r == 1 ? shared_ : last_handed_;
    const SpyreStream previous = spyre::setCurrentStream(s);
    // Per thread: no other thread's switch is ever visible here.
    STRESS_CHECK(previous.id() == current_, "previous current stream " +
                                                std::to_string(previous.id()) + ", expected " +
                                                std::to_string(current_));
    current_ = s.id();
    STRESS_CHECK(spyre::getCurrentStream(-1).id() == current_, "current stream not set");
  }

  void queryOrSynchronize() {
    switch (rng_.below(4)) {
      case 0:
        (void)priv_.query();
        break;
      case 1: {
        priv_.synchronize();
        checkDrained(priv_.id());
        // Nobody else launches onto it: now it is idle, exactly.
        STRESS_CHECK(priv_.query(), "private stream busy after synchronize");
        flex::RuntimeStream* h = priv_.resolveRuntimeHandle();
        STRESS_CHECK(flex::test::launchedOps(h) == flex::test::completedOps(h), "ops still pending");
        break;
      }
      case 2: {
        const SpyreStream s = sharedTarget();
        (void)s.query();
        break;
      }
      default: {
        const SpyreStream s = sharedTarget();
        s.synchronize();
        checkDrained(s.id());
      }
    }
  }

  // Work on the private stream A, then an event makes work on a shared stream
  // B wait for it. `value` is plain memory: the event is the only ordering.
  void eventRoundTrip() {
    const SpyreStream a = priv_;
    const SpyreStream b = sharedTarget();
    auto value = std::make_shared<uint64_t>(0);
    const uint64_t token = rng_.next() | 1;
    a.launchHostCallback([value, token] { *value = token; }, "event-producer");
    flex::RuntimeEvent event(/*enable_timing=*/rng_.below(2) == 0);
    event.record(a.resolveRuntimeHandle());
    event.wait(b.resolveRuntimeHandle());
    b.launchHostCallback(
        [value, token] {
          if (*value != token) g_event_violations.fetch_add(1);
        },
        "event-consumer");
    if (rng_.below(4) == 0) {
      event.synchronize();
      STRESS_CHECK(event.query(), "event incomplete after synchronize");
      STRESS_CHECK(*value == token, "event completed before the work it recorded");
    }
    // Destroyed here with its record and wait possibly still pending (allowed).
  }

  void launch() {
    const uint64_t r = rng_.below(20);
    if (r < 3) {
      copyRoundTrip();
      return;
    }
    if (r == 3) {
      fillRoundTrip();
      return;
    }
    const SpyreStream s = rng_.below(2) == 0 ? priv_ : sharedTarget();
    if (r == 4) {
      if (rng_.below(16) == 0) {
        static constexpr const char* kNames[] = {"-1", "nan", "1e+300"};
        const uint64_t which = rng_.below(3);
        const double bad = which == 0 ? -1.0 : which == 1 ? std::nan("") : 1e300;
        expectError([&] { s.launchDelay(bad); },
                    "delay must be a finite, non-negative number of milliseconds, at most "
                    "9.2e+12, got " + std::string(kNames[which]));
      } else {
        s.launchDelay(rng_.below(2) == 0 ? 0.0 : 0.001);
      }
      return;
    }
    launchSequenced(s, r < 12);
  }

  void launchSequenced(const SpyreStream& s, bool as_compute) {
    const c10::StreamId id = s.id();
    const uint64_t seq = launched_[id] + 1;
    uint64_t* slot = &g_exec[tid_][id];
    auto fn = [slot, seq] {
      if (*slot + 1 != seq) g_order_violations.fetch_add(1);
      *slot = seq;
    };
    if (as_compute) {
      s.launchCompute(fn, "seq", 8);
    } else {
      s.launchHostCallback(fn, "seq");
    }
    launched_[id] = seq;
  }

  // H2D, D2D, D2H on the private stream; the values must come back.
  void copyRoundTrip() {
    const int32_t base = static_cast<int32_t>(rng_.below(1 << 20));
    for (size_t i = 0; i < kWords; ++i) src_[i] = base + static_cast<int32_t>(i);
    dst_.fill(-1);
    try {
      priv_.launchH2D(src_.data(), dev_, kWords * 4);
      priv_.launchD2D(dev_, dev2_, kWords * 4);
      priv_.launchD2H(dev2_, dst_.data(), kWords * 4);
    } catch (...) {
      // A rejected launch (shutdown) must not let the next round trip rewrite
      // host buffers an accepted copy may still be reading: drain first.
      try {
        priv_.synchronize();
      } catch (...) {
      }
      throw;
    }
    priv_.synchronize();
    STRESS_CHECK(dst_ == src_, "copy round trip lost data");
  }

  void fillRoundTrip() {
    const int32_t value = static_cast<int32_t>(rng_.below(1000)) - 500;
    priv_.launchFill(dev_, kWords * 4, value, flex::DataFormats::INT32);
    priv_.launchD2H(dev_, dst_.data(), kWords * 4);
    priv_.synchronize();
    for (size_t i = 0; i < kWords; ++i) {
      if (dst_[i] != value) {
        STRESS_CHECK(false, "fill gave " + std::to_string(dst_[i]) + ", expected " +
                                std::to_string(value));
        break;
      }
    }
  }

  template <class F>
  void expectError(F f, const std::string& text) {
    try {
      f();
      STRESS_CHECK(false, "no error, expected: " + text);
    } catch (const c10::Error& e) {
      STRESS_CHECK(contains(e, text), "'" + std::string(e.what_without_backtrace()) +
                                           "' does not contain '" + text + "'");
      g_expected_errors.fetch_add(1, std::memory_order_relaxed);
    }
  }

  int tid_;
  Rng rng_;
  SpyreStream priv_;
  std::vector<c10::StreamId> private_ids_;
  SpyreStream shared_;
  SpyreStream last_handed_ = spyre::getDefaultStream();
  c10::StreamId current_ = spyre::kDefaultStreamId;
  std::array<uint64_t, kIds> launched_{};
  void* dev_;
  void* dev2_;
  std::array<int32_t, kWords> src_{};
  std::array<int32_t, kWords> dst_{};
};

template <class F>
void runThreads(int n, F f) {
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) threads.emplace_back(f, t);
  for (auto& thread : threads) thread.join();
}

int summary(const char* mode) {
  const uint64_t failures = stress::g_failures.load() + g_order_violations.load() +
                            g_event_violations.load() + audit::violations();
  std::printf(
      "%s: failures=%llu order_violations=%llu event_violations=%llu expected_errors=%llu "
      "runtime_calls=%llu calls_under_pool_lock=%llu%s%s\n",
      mode, static_cast<unsigned long long>(stress::g_failures.load()),
      static_cast<unsigned long long>(g_order_violations.load()),
      static_cast<unsigned long long>(g_event_violations.load()),
      static_cast<unsigned long long>(g_expected_errors.load()),
      static_cast<unsigned long long>(audit::calls()),
      static_cast<unsigned long long>(audit::violations()),
      audit::violations() ? " first: " : "", audit::firstViolation().c_str());
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

// Main phase: every thread runs `ops` mixed operations; then the fault phase.
int stressMode(int64_t ops, uint64_t seed) {
  spyre::startRuntime();
  STRESS_CHECK(spyre::SpyreGetDeviceState() == spyre::SpyreDeviceState::Ok, "");
  g_exec.assign(g_threads, {});
  // One private stream per thread (ids 1..threads): only its thread launches
  // onto it, so "idle after synchronize" is exact there.
  std::vector<SpyreStream> privates;
  std::vector<c10::StreamId> private_ids;
  for (int t = 0; t < g_threads; ++t) {
    privates.push_back(spyre::getStreamFromPool(0));
    private_ids.push_back(privates.back().id());
  }
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < g_threads; ++t) {
    workers.push_back(std::make_unique<Worker>(t, privates[t], private_ids, seed));
  }
  const auto start = Clock::now();
  runThreads(g_threads, [&](int t) { workers[t]->run(ops); });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  spyre::synchronizeDeviceOrThrow(-1);
  for (auto& w : workers) w->checkAllDrained();
  STRESS_CHECK(spyre::mappedStreamCount() <= static_cast<size_t>(kIds), "");
  std::printf("stress: threads=%d ops_per_thread=%lld total_ops=%lld seconds=%.2f\n", g_threads,
              static_cast<long long>(ops), static_cast<long long>(ops) * g_threads, seconds);

  // Fault phase: every thread faults its private stream at once.
  runThreads(g_threads, [&](int t) { workers[t]->faults(); });
  STRESS_CHECK(spyre::SpyreGetDeviceState() == spyre::SpyreDeviceState::StreamError, "");
  STRESS_CHECK(spyre::getDefaultStream().getError() == spyre::SpyreStreamError::Success, "");
  spyre::synchronizeDeviceOrThrow(-1);  // every failure was reported already: no throw
  // A failure nobody reported surfaces from the device synchronize, once.
  const SpyreStream victim = spyre::getStreamFromPool(-1);
  flex::test::injectFault(victim.resolveRuntimeHandle(), "device-sync fault");
  victim.launchDelay(0);
  int reports = 0;
  for (int i = 0; i < 2; ++i) {
    try {
      spyre::synchronizeDeviceOrThrow(-1);
    } catch (const std::exception& e) {
      ++reports;
      STRESS_CHECK(std::string(e.what()) == "device-sync fault", e.what());
    }
  }
  STRESS_CHECK(reports == 1, "device-sync fault reported " + std::to_string(reports) + " times");
  STRESS_CHECK(victim.getError() == spyre::SpyreStreamError::Shutdown, "");
  STRESS_CHECK(std::string(spyre::SpyreStreamGetErrorString(victim.getError())) == "Shutdown", "");
  std::printf("faults: injected=%d\n", g_threads + 1);
  workers.clear();
  return summary("stress");
}

// Readers resolve handles and take the pool's shared_lock (mappedStreamCount;
// a resolve is served from the thread's handle cache after its first call)
// while one thread first-touches all 64 pool ids and every creation sleeps
// `slow_ms` (audit.cpp). Were a creation to run under the pool lock, no
// reader could complete while it is in progress. Checks:
//  1. while the first creation is in progress, another thread resolves a
//     handle, reads the map size and takes a hand-out (the write lock): it
//     finishes before the creation does (a 5 s deadline turns a hang into a
//     failure);
//  2. readers complete >= 10 resolutions per creation entirely inside a
//     creation (same odd audit::creationSeq() before and after); a held lock
//     makes that count exactly 0, unblocked readers do thousands;
//  3. the audit: no runtime call under the pool lock.
// Reader wall-clock latency is printed, not asserted (scheduler noise).
int lockHoldMode(int slow_ms, int readers) {
  spyre::startRuntime();
  const size_t at_start = 1 + static_cast<size_t>(spyre::hostComputeStreamCount());
  STRESS_CHECK(spyre::mappedStreamCount() == at_start, "fresh process expected");
  // The host-compute streams were created at the runtime's start.
  const uint64_t created_at_start = audit::creations();
  audit::setSlowCreate(std::chrono::milliseconds(slow_ms));
  std::atomic<int> probe_result{-1};  // 1: completed during the creation
  audit::setCreateHook([&] {
    auto done = std::make_shared<std::atomic<bool>>(false);
    // Detached: were the lock held, the probe could finish only after us.
    std::thread([done] {
      (void)spyre::getDefaultStream().resolveRuntimeHandle();
      (void)spyre::mappedStreamCount();
      (void)spyre::getStreamFromPool(0);  // the write lock
      *done = true;
    }).detach();
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!*done && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    probe_result = *done ? 1 : 0;
  });
  std::atomic<bool> touching{true};
  std::vector<uint64_t> counts(readers, 0);
  std::vector<uint64_t> inside(readers, 0);  // completed inside one creation
  std::vector<double> max_wait_ms(readers, 0);
  std::thread toucher([&] {
    for (int i = 0; i < 64; ++i) spyre::getStreamFromPool(i % 2 == 0 ? 0 : -1);
    touching = false;
  });
  const auto start = Clock::now();
  runThreads(readers, [&](int r) {
    const SpyreStream s = spyre::getDefaultStream();
    while (touching.load()) {
      const uint64_t seq = audit::creationSeq();
      const auto t0 = Clock::now();
      (void)s.resolveRuntimeHandle();  // from the thread's handle cache after the first call
      (void)spyre::getCurrentStream(-1);
      (void)spyre::mappedStreamCount();  // the shared_lock, every iteration
      const double waited = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      if (seq % 2 == 1 && audit::creationSeq() == seq) ++inside[r];
      max_wait_ms[r] = std::max(max_wait_ms[r], waited);
      ++counts[r];
    }
  });
  toucher.join();
  const double window_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  STRESS_CHECK(probe_result.load() == 1, "a reader or writer waited for a stream creation");
  // 64 by the toucher; the probe's hand-out maps no extra id (ids repeat round robin).
  const uint64_t creations = audit::creations() - created_at_start;
  STRESS_CHECK(creations == 64, "creations=" + std::to_string(creations));
  STRESS_CHECK(spyre::mappedStreamCount() == 64 + at_start, "");
  uint64_t total = 0, total_inside = 0;
  double max_wait = 0;
  for (int r = 0; r < readers; ++r) {
    total += counts[r];
    total_inside += inside[r];
    max_wait = std::max(max_wait, max_wait_ms[r]);
  }
  std::printf(
      "lock-hold: creations=64 slow_create_ms=%d window_ms=%.0f readers=%d "
      "resolutions=%llu inside_creations=%llu max_reader_wait_ms=%.2f probe=%s\n",
      slow_ms, window_ms, readers, static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(total_inside), max_wait,
      probe_result.load() == 1 ? "ok" : "blocked");
  STRESS_CHECK(total_inside >= 64 * 10, "readers completed only " + std::to_string(total_inside) +
                                            " resolutions while a creation was in progress");
  return summary("lock-hold");
}

// Captures joining a launching stream: one thread launches run-once work on
// stream S (as the launch path's Work: it gives its state up after one run
// unless it was prepared for replays when it was recorded), another captures
// on its own stream, makes S join the capture (an event wait) and join back,
// ends the capture and replays the graph twice. Whichever launches S's joins
// catch, a recorded work must be replayable: a work recorded without being
// prepared would run on a null state at the second replay.
struct CaptureJoinWork {
  bool replayable = false;  // set under the capture lock, read by replays
};
std::atomic<uint64_t> g_replayed_runs{0};

int captureJoinMode(int64_t iterations) {
  spyre::startRuntime();
  const SpyreStream joined = spyre::getStreamFromPool(0);
  const SpyreStream origin = spyre::getStreamFromPool(0);
  std::atomic<bool> capturing_done{false};
  std::atomic<uint64_t> launched{0};
  std::thread launcher([&] {
    while (!capturing_done.load(std::memory_order_acquire)) {
      auto work = std::make_shared<CaptureJoinWork>();
      // As the launch path's ops: what a capture records is what record_as
      // returns, made under the capture lock (it owns the state and replays it).
      spyre::ComputeRelease release;
      release.record_as = [work]() -> std::function<void()> {
        work->replayable = true;
        return [work] {
          STRESS_CHECK(work->replayable, "a recorded work that was not prepared for replays");
          g_replayed_runs.fetch_add(1, std::memory_order_relaxed);
        };
      };
      try {
        joined.launchCompute(
            spyre::checkDevice(joined.device_index()), [work = std::move(work)]() mutable {
              if (work->replayable) g_replayed_runs.fetch_add(1, std::memory_order_relaxed);
              if (!work->replayable) work.reset();  // run once: its state is gone
            },
            "capture-join-op", 0, &release);
      } catch (const std::exception& e) {
        STRESS_CHECK(false, std::string("launch on the joined stream raised: ") + e.what());
      }
      launched.fetch_add(1, std::memory_order_relaxed);
      // Let the capturing thread in: a launcher that keeps the capture lock
      // busy records thousands of nodes per capture.
      std::this_thread::yield();
    }
  });
  uint64_t ended = 0, unjoined = 0, recorded = 0;
  for (int64_t i = 0; i < iterations; ++i) {
    spyre::capture::Capture capture;
    int fork_event = 0, join_event = 0;  // only their addresses name them
    spyre::capture::begin(capture, origin.id(), spyre::capture::Mode::Relaxed, {0, 0});
    STRESS_CHECK(spyre::capture::recordEvent(&fork_event, origin.id()), "");
    STRESS_CHECK(spyre::capture::waitEvent(&fork_event, joined.id()), "");  // joined joins
    // At least one launch wholly inside the join; the one in flight at either
    // end falls on whichever side its record does.
    const uint64_t before = launched.load();
    while (launched.load() < before + 2) std::this_thread::yield();
    STRESS_CHECK(spyre::capture::recordEvent(&join_event, joined.id()), "");
    STRESS_CHECK(spyre::capture::waitEvent(&join_event, origin.id()), "");  // and back
    try {
      spyre::capture::end(capture);
      ++ended;
    } catch (const c10::Error& e) {
      // An op recorded on the joined stream after its join back: CUDA's
      // "unjoined" error, the capture holds nothing.
      STRESS_CHECK(contains(e, "is not joined back"), e.what());
      ++unjoined;
      continue;
    }
    uint64_t ops = 0;
    for (const spyre::capture::Node& node : capture.nodes) ops += node.name == "capture-join-op";
    recorded += ops;
    if (ops == 0) continue;
    flex::RuntimeStream* handle = origin.resolveRuntimeHandle();
    handle->launchGraph(capture.graph);
    handle->launchGraph(capture.graph);
    origin.synchronize();
  }
  capturing_done.store(true, std::memory_order_release);
  launcher.join();
  joined.synchronize();
  STRESS_CHECK(g_replayed_runs.load() == 2 * recorded,
               "replayed runs " + std::to_string(g_replayed_runs.load()) + ", expected 2 x " +
                   std::to_string(recorded) + " recorded ops");
  std::printf("capture-join: iterations=%lld ended=%llu unjoined=%llu launched=%llu recorded=%llu\n",
              static_cast<long long>(iterations), static_cast<unsigned long long>(ended),
              static_cast<unsigned long long>(unjoined),
              static_cast<unsigned long long>(launched.load()),
              static_cast<unsigned long long>(recorded));
  return summary("capture-join");
}

// The hazard tracker (sanitizer Mode::Order) from two threads launching on one
// stream: each launch reads bytes a gated stream writes, so each must be
// queued behind a wait for that write. The first launch to be checked merges
// the writer's clock; the second then sees it ordered, so the first's wait
// must already be queued when the second is checked. First, a launch that
// raises (Mode::Raise) must leave no access behind to be reported.
std::vector<spyre::sanitizer::Access> accessOf(uintptr_t origin, bool write) {
  spyre::sanitizer::Access access;
  access.bytes.origin = origin;
  access.bytes.itemsize = 4;
  access.bytes.sizes = {16};
  access.bytes.strides = {1};
  access.bytes.what = "float32[16]";
  access.write = write;
  return {access};
}

int hazardOrderMode(int64_t iterations) {
  namespace san = spyre::sanitizer;
  spyre::startRuntime();
  const SpyreStream writer = spyre::getStreamFromPool(0);
  const SpyreStream reader = spyre::getStreamFromPool(0);
  san::setMode(san::Mode::Raise);
  try {
    san::onLaunch(writer.id(), "raising-write", accessOf(0x100000, true),
                  [] { throw std::runtime_error("the launch failed"); });
    STRESS_CHECK(false, "a raising launch did not raise");
  } catch (const std::runtime_error& e) {
    STRESS_CHECK(std::string(e.what()) == "the launch failed", e.what());
  }
  try {
    san::onLaunch(reader.id(), "write", accessOf(0x100000, true), [] {});
  } catch (const std::exception& e) {
    STRESS_CHECK(false, std::string("reported against a launch that raised: ") + e.what());
  }
  san::setMode(san::Mode::Order);
  std::atomic<uint64_t> early{0};
  for (int64_t i = 0; i < iterations; ++i) {
    const uintptr_t origin = 0x200000 + static_cast<uintptr_t>(i) * 0x100;
    auto written = std::make_shared<std::atomic<bool>>(false);
    flex::test::Gate gate;
    gate.enqueueOn(writer.resolveRuntimeHandle());
    san::onLaunch(writer.id(), "write", accessOf(origin, true), [&] {
      writer.launchCompute([written] { written->store(true); }, "write");
    });
    std::atomic<int> ready{0};
    runThreads(2, [&](int) {
      ready.fetch_add(1);
      while (ready.load() < 2) std::this_thread::yield();
      san::onLaunch(reader.id(), "read", accessOf(origin, false), [&] {
        reader.launchCompute(
            [written, &early] {
              if (!written->load()) early.fetch_add(1);
            },
            "read");
      });
    });
    gate.release();  // a read queued without its wait may have run already
    writer.synchronize();
    reader.synchronize();
  }
  san::setMode(san::Mode::Off);
  STRESS_CHECK(early.load() == 0,
               std::to_string(early.load()) + " reads ran before the write they were ordered after");
  std::printf("hazard-order: iterations=%lld early_reads=%llu ordering_waits=%lld\n",
              static_cast<long long>(iterations), static_cast<unsigned long long>(early.load()),
              static_cast<long long>(san::orderingWaits()));
  return summary("hazard-order");
}

// Clean exit with work queued: a gate that is never released blocks the
// default stream and a pool stream with work behind it, a 60 s delay occupies
// another, memory stays allocated. Returning from main must be quick and quiet.
int exitQueuedMode() {
  spyre::startRuntime();
  static auto* gate = new flex::test::Gate();  // leaked: never released
  auto ran = std::make_shared<std::atomic<int>>(0);
  for (const SpyreStream& s : {spyre::getDefaultStream(), spyre::getStreamFromPool(0)}) {
    gate->enqueueOn(s.resolveRuntimeHandle());
    for (int i = 0; i < 100; ++i) s.launchHostCallback([ran] { ++*ran; }, "queued");
  }
  spyre::getStreamFromPool(-1).launchDelay(60000);
  (void)spyre::runtimeContext()->allocate(1 << 20);
  std::printf("exit-queued: returning from main with work queued\n");
  return summary("exit-queued");
}

// exit() from a non-main thread while the main thread waits on gated work.
int exitThreadMode() {
  spyre::startRuntime();
  static auto* gate = new flex::test::Gate();
  const SpyreStream s = spyre::getStreamFromPool(0);
  gate->enqueueOn(s.resolveRuntimeHandle());
  s.launchDelay(1);
  std::thread([] {
    while (gate->blockedStreams() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (summary("exit-thread") != 0) std::_Exit(1);
    std::exit(0);
  }).detach();
  s.synchronize();  // returns once the runtime shuts down at exit
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// exit() while 8 threads are in the middle of the stress mix.
int exitDuringMode(int64_t ops, uint64_t seed) {
  spyre::startRuntime();
  g_exec.assign(g_threads, {});
  std::vector<c10::StreamId> ids;
  std::vector<SpyreStream> privates;
  for (int t = 0; t < g_threads; ++t) {
    privates.push_back(spyre::getStreamFromPool(0));
    ids.push_back(privates.back().id());
  }
  g_exiting = true;  // workers swallow "runtime is shut down" errors from now on
  for (int t = 0; t < g_threads; ++t) {
    std::thread([t, ops, seed, ids, s = privates[t]] {
      Worker(t, s, ids, seed).run(ops);
    }).detach();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::printf("exit-during: exiting with %d threads running\n", g_threads);
  std::fflush(stdout);
  return 0;
}

// spyreccl's peer access windows from many threads: each thread queues a
// window on its held stream while a peer thread waits for it to open (the
// window's stream field is written by one thread and read by the other), then
// queues its close on its comm stream behind a callback (the hold: it closes
// only once that stream ran what was queued before), now and then on a comm
// stream failed on purpose (the close is refused or dropped, and closes it).
int peerWindowsMode(int64_t ops) {
  spyre::startRuntime();
  std::atomic<uint64_t> opened{0};
  runThreads(g_threads, [&](int) {
    const SpyreStream held = spyre::getStreamFromPool(0);
    const SpyreStream comm = spyre::getStreamFromPool(0);
    for (int64_t i = 0; i < ops; ++i) {
      flex::PeerAccessWindow window;
      std::atomic<bool> queued{false};
      std::atomic<bool> peer_done{false};
      std::thread peer([&] {
        // Reads the window's stream while the owner may be writing it.
        while (!queued.load(std::memory_order_acquire)) (void)window.isOpen();
        if (window.waitOpen()) opened.fetch_add(1, std::memory_order_relaxed);
        peer_done = true;
      });
      held.launchPeerAccessWindow(window, "stress");
      queued.store(true, std::memory_order_release);
      try {
        held.launchPeerAccessWindow(window, "stress");
        STRESS_CHECK(false, "a window was queued twice");
      } catch (const flex::Error& e) {
        STRESS_CHECK(contains(e, "already queued"), e.what());
      }
      auto ran = std::make_shared<std::atomic<int>>(0);
      if (i % 97 != 13) {
        comm.launchHostCallback([ran] { ++*ran; }, "copy back");
        comm.launchPeerAccessClose(window, "stress");
        held.synchronize();  // returns once the close ran, after the callback
        STRESS_CHECK(ran->load() == 1, "the hold closed before the work queued ahead of it");
      } else {
        // A comm stream of its own (a pool stream would stay failed for the
        // other threads), failed: the close queued behind the failing work is
        // dropped, and closes the window.
        flex::RuntimeStream* failing = spyre::runtimeContext()->createStream();
        flex::test::injectFault(failing, "stress: comm failed");
        flex::HostCallbackParams callback;
        callback.fn = [ran] { ++*ran; };
        failing->launchOperationHostCallback(&callback);
        try {
          window.closeWhenReached(failing);  // dropped with the failing work's queue
        } catch (const flex::Error&) {
          window.close();  // the failure latched first: what spyreccl does then
        }
        held.synchronize();  // never hangs
        try {
          failing->synchronize();
          STRESS_CHECK(false, "the injected fault was not reported");
        } catch (const flex::Error& e) {
          STRESS_CHECK(contains(e, "stress: comm failed"), e.what());
          g_expected_errors.fetch_add(1, std::memory_order_relaxed);
        }
        try {
          window.closeWhenReached(failing);  // refused on a failed stream
          STRESS_CHECK(false, "a failed stream took the close");
        } catch (const flex::Error&) {
          g_expected_errors.fetch_add(1, std::memory_order_relaxed);
        }
      }
      peer.join();
      STRESS_CHECK(peer_done.load() && !window.isOpen(), "the window stayed open");
    }
  });
  STRESS_CHECK(opened.load() == static_cast<uint64_t>(g_threads) * ops, "a window never opened");
  return summary("peer-windows");
}

}  // namespace

int main(int argc, char** argv) {
  g_threads = static_cast<int>(stress::option(argc, argv, "--threads", 8));
  const int64_t ops = stress::option(argc, argv, "--ops", 100000);
  const uint64_t seed = static_cast<uint64_t>(stress::option(argc, argv, "--seed", 1));
  const std::string mode = stress::optionString(argc, argv, "--mode", "stress");
  if (mode == "stress") return stressMode(ops, seed);
  if (mode == "lock-hold") {
    return lockHoldMode(static_cast<int>(stress::option(argc, argv, "--slow-create-ms", 20)),
                        static_cast<int>(stress::option(argc, argv, "--readers", 4)));
  }
  if (mode == "exit-queued") return exitQueuedMode();
  if (mode == "exit-thread") return exitThreadMode();
  if (mode == "exit-during") return exitDuringMode(ops, seed);
  if (mode == "capture-join") return captureJoinMode(stress::option(argc, argv, "--ops", 2000));
  if (mode == "hazard-order") return hazardOrderMode(stress::option(argc, argv, "--ops", 2000));
  if (mode == "peer-windows") return peerWindowsMode(stress::option(argc, argv, "--ops", 2000));
  std::fprintf(stderr, "unknown --mode '%s'\n", mode.c_str());
  return 2;
}
