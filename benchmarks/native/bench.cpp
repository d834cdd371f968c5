// Microbenchmarks (spyre_bench.h) and their reference designs:
//   R0  the floor: a thread-local current id indexing a plain handle array;
//   R1  a CUDA-style lock-free pool: an atomic round-robin counter per priority
//       and an array of handles published once with a release store;
//   R2  a bare worker thread: a mutex/condition-variable FIFO and an in-flight
//       counter (launched vs completed) that makes an idle sync free.
// They live in this file, in the same .so as the pool, on purpose: a reference
// built elsewhere would pay a different TLS model and call overhead.
#include "bench.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <c10/macros/Macros.h>
#include <c10/util/CallOnce.h>
#include <c10/util/Exception.h>

#include <flex/testing.hpp>

#include "runtime/card_priced_launch.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre {
namespace {

using Clock = std::chrono::steady_clock;
using Handle = flex::RuntimeStream*;

// Emulated device time of one task in the overlap benchmarks.
constexpr double kDelayMs = 20.0;

// Keeps a computed value, and the work behind it, from being optimized away.
template <class T>
inline void keep(T value) {
  asm volatile("" : : "r"(value) : "memory");
}

// A reference's calls must stay calls: noinline alone still lets GCC prove a
// function pure and hoist it out of a timing loop.
#define BENCH_OPAQUE __attribute__((noinline, noipa))

double nsBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::nano>(end - start).count();
}

template <class F>
double nsPerCall(int64_t calls, F&& f) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < calls; ++i) f();
  return nsBetween(start, Clock::now()) / static_cast<double>(calls);
}

// Pins a benchmark-owned thread, as the anchors were measured, when the
// process may run on `cpu` at all.
void pinTo(int cpu) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0 || !CPU_ISSET(cpu, &allowed)) return;
  cpu_set_t only;
  CPU_ZERO(&only);
  CPU_SET(cpu, &only);
  pthread_setaffinity_np(pthread_self(), sizeof only, &only);
}

struct Latency {
  double p50 = 0, p99 = 0, max = 0;
};

Latency percentiles(std::vector<double> samples) {
  TORCH_CHECK(!samples.empty(), "benchmark: no latency samples");
  std::sort(samples.begin(), samples.end());
  return {samples[samples.size() / 2], samples[(samples.size() - 1) * 99 / 100], samples.back()};
}

// ------------------------------------------------------------------ R0
thread_local c10::StreamId r0_current_id = kDefaultStreamId;
std::array<Handle, kNumPoolStreamIds> r0_handles{};

BENCH_OPAQUE Handle r0CurrentHandle() {
  return r0_handles[r0_current_id];
}

// ------------------------------------------------------------------ R1
struct R1Pool {
  std::array<std::atomic<uint32_t>, 2> next{};  // [low, high]
  std::array<std::atomic<Handle>, kNumPoolStreamIds> handles{};
  std::array<c10::once_flag, kNumPoolStreamIds> created;

  explicit R1Pool(Handle default_stream) { handles[kDefaultStreamId].store(default_stream); }

  // 2^32 is a multiple of 32, so the order survives the counter wrapping.
  BENCH_OPAQUE c10::StreamId handOut(int priority) {
    const bool high = priority < 0;
    const c10::StreamId id = (high ? kFirstHighPriorityStreamId : kFirstLowPriorityStreamId) +
                             next[high].fetch_add(1, std::memory_order_relaxed) % kStreamsPerPool;
    if (C10_UNLIKELY(handles[id].load(std::memory_order_acquire) == nullptr)) {
      c10::call_once(created[id], [&] {
        const auto priority =
            high ? flex::RuntimeStreamPriority::HIGH : flex::RuntimeStreamPriority::NORMAL;
        handles[id].store(runtimeContext()->createStream(priority), std::memory_order_release);
      });
    }
    return id;
  }

  BENCH_OPAQUE Handle resolve(c10::StreamId id) const {
    const Handle handle =
        id >= 0 && id < kNumPoolStreamIds ? handles[id].load(std::memory_order_acquire) : nullptr;
    TORCH_CHECK(handle != nullptr, "R1: no handle for stream id ", id);
    return handle;
  }
};

// ------------------------------------------------------------------ R2
struct InFlight {
  std::atomic<uint64_t> launched{0};
  std::atomic<uint64_t> completed{0};

  BENCH_OPAQUE bool idle() const {
    return completed.load(std::memory_order_acquire) >= launched.load(std::memory_order_acquire);
  }
};

class R2Worker {
 public:
  R2Worker() : thread_([this] { run(); }) {}
  ~R2Worker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    work_cv_.notify_one();
    thread_.join();
  }

  BENCH_OPAQUE void launch(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(task));
      counts_.launched.fetch_add(1, std::memory_order_release);
    }
    work_cv_.notify_one();
  }

  BENCH_OPAQUE void synchronize() {
    const uint64_t target = counts_.launched.load(std::memory_order_acquire);
    if (counts_.completed.load(std::memory_order_acquire) >= target) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] {
      return counts_.completed.load(std::memory_order_relaxed) >= target;
    });
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      counts_.completed.fetch_add(1, std::memory_order_release);
      done_cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<std::function<void()>> queue_;
  InFlight counts_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// ------------------------------------------------------------------ helpers
Handle handleOf(c10::StreamId id) {
  return SpyreStream(c10::Stream(c10::Stream::UNSAFE, getDefaultStream().device(), id))
      .resolveRuntimeHandle();
}

Handle defaultHandle() {
  return handleOf(kDefaultStreamId);
}

// Hands out every pool id once, so later hand-outs never create a stream.
void mapAllPoolStreams() {
  for (int i = 0; i < kStreamsPerPool; ++i) {
    getStreamFromPool(0);
    getStreamFromPool(-1);
  }
}

// Starts the runtime and checks that no pool id was handed out yet, so no
// stream has been used and no engine thread exists. (The default stream and
// the host-compute streams are mapped at start.)
void requireFreshProcess(const char* benchmark) {
  startRuntime();
  const size_t at_start = 1 + static_cast<size_t>(hostComputeStreamCount());
  TORCH_CHECK(mappedStreamCount() == at_start, benchmark, " must run in a fresh process: ",
              mappedStreamCount() - at_start, " pool ids are already mapped");
}

R1Pool& warmR1() {
  static R1Pool* pool = [] {
    auto* created = new R1Pool(defaultHandle());  // leaked, like our pool
    for (int i = 0; i < kStreamsPerPool; ++i) {
      created->handOut(0);
      created->handOut(-1);
    }
    return created;
  }();
  return *pool;
}

template <class Ours, class Ref>
void interleave(BenchResult& out, int repeats, Ours&& ours, Ref&& ref) {
  for (int r = 0; r < repeats; ++r) {
    out["ours"].push_back(ours());
    out["ref"].push_back(ref());
  }
}

// Thread 0 times `read` call by call while thread 1 loops `write`; returns
// the read latencies. The writer starts after the reader's first call, so the
// two always overlap.
template <class Read, class Write>
std::vector<double> readWhileWriting(int64_t reads, Read&& read, Write&& write) {
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(reads));
  std::atomic<bool> reading{false};
  std::atomic<bool> reader_done{false};
  std::thread reader([&] {
    pinTo(0);
    for (int64_t i = 0; i < reads; ++i) {
      const auto start = Clock::now();
      read();
      samples.push_back(nsBetween(start, Clock::now()));
      reading.store(true, std::memory_order_relaxed);
    }
    reader_done.store(true);
  });
  std::thread writer([&] {
    pinTo(1);
    while (!reading.load()) std::this_thread::yield();
    while (!reader_done.load(std::memory_order_relaxed)) write();
  });
  reader.join();
  writer.join();
  return samples;
}

struct ReadsDuringWrites {
  std::vector<double> longest_read;  // per write
  double writes_ns = 0;              // from the first write's start to the last one's end
};

// Thread 1 makes `writes` calls of `write` while thread 0 loops `read` until
// the writer is done. Finds, per write, the longest read that overlapped it:
// a read overlaps write k if k started before the read ended and had not
// finished when the read started.
template <class Read, class Write>
ReadsDuringWrites longestReadPerWrite(int writes, Read&& read, Write&& write) {
  std::vector<double> longest(static_cast<size_t>(writes), 0.0);
  double writes_ns = 0;
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  std::atomic<bool> reading{false};
  std::thread reader([&] {
    pinTo(0);
    while (finished.load() < writes) {
      const int finished_before = finished.load();
      const auto start = Clock::now();
      read();
      const double ns = nsBetween(start, Clock::now());
      const int started_after = started.load();
      for (int k = finished_before; k < started_after; ++k) {
        longest[k] = std::max(longest[k], ns);
      }
      reading.store(true, std::memory_order_relaxed);
    }
  });
  std::thread writer([&] {
    pinTo(1);
    while (!reading.load()) std::this_thread::yield();
    const auto start = Clock::now();
    for (int k = 0; k < writes; ++k) {
      started.store(k + 1);
      write(k);
      finished.store(k + 1);
    }
    writes_ns = nsBetween(start, Clock::now());
  });
  reader.join();
  writer.join();
  return {std::move(longest), writes_ns};
}

// ------------------------------------------------------------------ pool
BenchResult poolResolve(int64_t n, int repeats) {
  mapAllPoolStreams();
  const SpyreStream ours = getStreamFromPool();
  const R1Pool& r1 = warmR1();
  const c10::StreamId id = ours.id();
  BenchResult out;
  interleave(
      out, repeats, [&] { return nsPerCall(n, [&] { keep(ours.resolveRuntimeHandle()); }); },
      [&] { return nsPerCall(n, [&] { keep(r1.resolve(id)); }); });
  return out;
}

BenchResult poolCurrentStream(int64_t n, int repeats) {
  mapAllPoolStreams();
  for (c10::StreamId id = 0; id < kNumPoolStreamIds; ++id) r0_handles[id] = handleOf(id);
  // A store GCC can see: otherwise it folds R0's thread-local read to a constant.
  r0_current_id = getCurrentStream().id();
  BenchResult out;
  interleave(
      out, repeats,
      [&] { return nsPerCall(n, [] { keep(getCurrentStream().resolveRuntimeHandle()); }); },
      [&] { return nsPerCall(n, [] { keep(r0CurrentHandle()); }); });
  return out;
}

BenchResult poolGetStreamFromPool(int64_t n, int repeats) {
  mapAllPoolStreams();
  R1Pool& r1 = warmR1();
  BenchResult out;
  interleave(
      out, repeats, [&] { return nsPerCall(n, [] { keep(getStreamFromPool(0).id()); }); },
      [&] { return nsPerCall(n, [&] { keep(r1.handOut(0)); }); });
  return out;
}

// "ours"/"ref" hold the reader's p99; the p50s are extras.
BenchResult poolMixedReader(int64_t n, int repeats) {
  mapAllPoolStreams();
  const SpyreStream ours = getStreamFromPool();
  R1Pool& r1 = warmR1();
  const c10::StreamId id = ours.id();
  BenchResult out;
  for (int r = 0; r < repeats; ++r) {
    const Latency mine = percentiles(readWhileWriting(
        n, [&] { keep(ours.resolveRuntimeHandle()); },
        [] { keep(getStreamFromPool(0).id()); }));
    const Latency theirs = percentiles(
        readWhileWriting(n, [&] { keep(r1.resolve(id)); }, [&] { keep(r1.handOut(0)); }));
    out["ours"].push_back(mine.p99);
    out["ref"].push_back(theirs.p99);
    out["ours_p50"].push_back(mine.p50);
    out["ref_p50"].push_back(theirs.p50);
  }
  return out;
}

// Must run before any pool id is handed out (a fresh process): thread 1 hands
// out all 64 ids, each creating its flex stream, while thread 0 resolves the
// default stream in a loop. The longest resolve that overlapped a first touch
// is the stall it caused; "ours"/"ref" hold the p99 of those stalls over the
// 64 first touches (with 64 values, the second longest).
BenchResult poolFirstTouch(int64_t /*iterations: the reader runs until the writer is done*/,
                           int /*repeats: once per process*/) {
  requireFreshProcess("pool.first_touch");
  constexpr int kFirstTouches = 2 * kStreamsPerPool;
  auto stalls = [&](auto&& read, auto&& handOut) {
    ReadsDuringWrites result = longestReadPerWrite(
        kFirstTouches, read, [&](int k) { keep(handOut(k % 2 == 0 ? 0 : -1)); });
    const auto& longest = result.longest_read;
    const auto stalled =
        std::count_if(longest.begin(), longest.end(), [](double ns) { return ns > 1000.0; });
    const Latency latency = percentiles(longest);
    return std::array<double, 4>{latency.p99, latency.max, static_cast<double>(stalled),
                                 result.writes_ns / kFirstTouches};
  };
  const SpyreStream default_stream = getDefaultStream();
  const auto mine = stalls([&] { keep(default_stream.resolveRuntimeHandle()); },
                           [](int priority) { return getStreamFromPool(priority).id(); });
  const size_t all_ids = kNumPoolStreamIds + static_cast<size_t>(hostComputeStreamCount());
  TORCH_CHECK(mappedStreamCount() == all_ids, "pool.first_touch: expected ", all_ids,
              " mapped ids, got ", mappedStreamCount());
  R1Pool fresh(defaultHandle());
  const auto theirs = stalls([&] { keep(fresh.resolve(kDefaultStreamId)); },
                             [&](int priority) { return fresh.handOut(priority); });
  return {{"ours", {mine[0]}},
          {"ref", {theirs[0]}},
          {"ours_max", {mine[1]}},
          {"ref_max", {theirs[1]}},
          {"ours_stalled", {mine[2]}},
          {"ref_stalled", {theirs[2]}},
          {"ours_ns_per_first_touch", {mine[3]}},
          {"ref_ns_per_first_touch", {theirs[3]}}};
}

// ------------------------------------------------------------------ stub
const std::function<void()> kNoop = [] {};

// "ours"/"ref" hold the median round trip; the p99s are extras. Runs in a fresh
// process, unpinned, as users run it: the stub's engine and R2's worker go
// wherever the scheduler puts them. The two alternate in short batches so both
// see the same machine.
BenchResult stubRoundTrip(int64_t n, int repeats) {
  requireFreshProcess("stub.round_trip");
  constexpr int64_t kBatch = 20;
  BenchResult out;
  const SpyreStream stream = getStreamFromPool();
  R2Worker r2;
  auto ours = [&] {
    stream.launchCompute(kNoop, "noop");
    stream.synchronize();
  };
  auto ref = [&] {
    r2.launch(kNoop);
    r2.synchronize();
  };
  auto timeBatch = [](std::vector<double>& samples, auto&& roundTrip) {
    for (int64_t i = 0; i < kBatch; ++i) {
      const auto start = Clock::now();
      roundTrip();
      samples.push_back(nsBetween(start, Clock::now()));
    }
  };
  ours();  // the first launch starts the engine
  for (int r = 0; r < repeats; ++r) {
    std::vector<double> mine, theirs;
    for (int64_t done = 0; done < n; done += kBatch) {
      timeBatch(mine, ours);
      timeBatch(theirs, ref);
    }
    const Latency a = percentiles(std::move(mine));
    const Latency b = percentiles(std::move(theirs));
    out["ours"].push_back(a.p50);
    out["ref"].push_back(b.p50);
    out["ours_p99"].push_back(a.p99);
    out["ref_p99"].push_back(b.p99);
  }
  return out;
}

// `n` launches back to back, then one synchronize: ns per launch, end to end.
BenchResult stubPipelined(int64_t n, int repeats) {
  const SpyreStream stream = getStreamFromPool();
  R2Worker r2;
  BenchResult out;
  interleave(
      out, repeats,
      [&] {
        const auto start = Clock::now();
        for (int64_t i = 0; i < n; ++i) stream.launchCompute(kNoop, "noop");
        stream.synchronize();
        return nsBetween(start, Clock::now()) / static_cast<double>(n);
      },
      [&] {
        const auto start = Clock::now();
        for (int64_t i = 0; i < n; ++i) r2.launch(kNoop);
        r2.synchronize();
        return nsBetween(start, Clock::now()) / static_cast<double>(n);
      });
  return out;
}

// Synchronize on an idle stream vs query() on it; checks nothing was enqueued.
BenchResult stubIdleSync(int64_t n, int repeats) {
  const SpyreStream stream = getStreamFromPool();
  stream.synchronize();
  const Handle handle = stream.resolveRuntimeHandle();
  const uint64_t launched_before = flex::test::launchedOps(handle);
  BenchResult out;
  interleave(
      out, repeats, [&] { return nsPerCall(n, [&] { stream.synchronize(); }); },
      [&] { return nsPerCall(n, [&] { keep(stream.query()); }); });
  out["enqueued_nothing"] = {flex::test::launchedOps(handle) == launched_before ? 1.0 : 0.0};
  return out;
}

// synchronizeDeviceOrThrow() with all 65 pool ids (and the host-compute streams)
// mapped and idle, vs checking as many in-flight counters (R2's idle test) in
// turn.
BenchResult stubIdleDeviceSync(int64_t n, int repeats) {
  mapAllPoolStreams();
  synchronizeDeviceOrThrow();
  std::vector<Handle> handles;
  std::vector<uint64_t> launched_before;
  const c10::StreamId end = kFirstHostComputeStreamId + hostComputeStreamCount();
  for (c10::StreamId id = 0; id < end; ++id) {
    handles.push_back(handleOf(id));
    launched_before.push_back(flex::test::launchedOps(handles.back()));
  }
  const size_t count = handles.size();
  std::unique_ptr<InFlight[]> counters(new InFlight[count]);
  BenchResult out;
  interleave(
      out, repeats, [&] { return nsPerCall(n, [] { synchronizeDeviceOrThrow(); }); },
      [&] {
        return nsPerCall(n, [&] {
          for (size_t i = 0; i < count; ++i) keep(counters[i].idle());
        });
      });
  bool enqueued_nothing = true;
  for (size_t i = 0; i < handles.size(); ++i) {
    enqueued_nothing = enqueued_nothing && flex::test::launchedOps(handles[i]) == launched_before[i];
  }
  out["mapped_streams"] = {static_cast<double>(mappedStreamCount())};
  out["enqueued_nothing"] = {enqueued_nothing ? 1.0 : 0.0};
  return out;
}

// Wall time of `delays_per_stream` delays of kDelayMs on each of `streams`
// (launched round robin), against the ideal kDelayMs as the reference.
BenchResult stubOverlap(const std::vector<SpyreStream>& streams, int delays_per_stream,
                        int repeats) {
  BenchResult out;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int d = 0; d < delays_per_stream; ++d) {
      for (const SpyreStream& s : streams) s.launchDelay(kDelayMs);
    }
    for (const SpyreStream& s : streams) s.synchronize();
    out["ours"].push_back(nsBetween(start, Clock::now()) / 1e6);
    out["ref"].push_back(kDelayMs);
  }
  return out;
}

std::vector<SpyreStream> poolStreams(int count) {
  std::vector<SpyreStream> streams;
  for (int i = 0; i < count; ++i) streams.push_back(getStreamFromPool());
  return streams;  // distinct: at most kStreamsPerPool consecutive hand-outs of one pool
}

// Card timing with 1 us of modeled host prep per kernel: each launch's busy
// interval is disjoint from the others. ns per launch (end to end) of `n`
// 1 KiB kernels after 2^20 launches ("ours") against the first ones ("ref"):
// the card summary's interval merge is amortised (docs/timing.md, "Summary").
BenchResult stubCardLaunchAfterMillion(int64_t n, int repeats) {
  setenv("FLEX_STUB_TIMING", "card", 1);  // before the runtime starts
  setenv("FLEX_STUB_CARD_HOST_PREP_US", "1", 1);
  requireFreshProcess("stub.card_launch_after_1m");
  const SpyreStream stream = getStreamFromPool();
  const CheckedDevice device = checkDevice(stream.device_index());
  flex::WorkCost cost;
  cost.bytes_read = cost.bytes_written = 1024;
  int64_t launched = 0;
  auto batch = [&](int64_t count) {
    const auto start = Clock::now();
    for (int64_t i = 0; i < count; ++i) launchComputeWithCost(stream, device, kNoop, "kernel", 1024, cost);
    stream.synchronize();
    launched += count;
    return nsBetween(start, Clock::now()) / static_cast<double>(count);
  };
  BenchResult out;
  for (int r = 0; r < repeats; ++r) out["ref"].push_back(batch(n));
  constexpr int64_t kMillion = int64_t{1} << 20;
  while (launched <= kMillion) batch(std::min<int64_t>(kMillion + 1 - launched, 65536));
  for (int r = 0; r < repeats; ++r) out["ours"].push_back(batch(n));
  out["compactions"].push_back(static_cast<double>(flex::test::cardCompactions()));
  return out;
}

using Benchmark = BenchResult (*)(int64_t, int);

const std::map<std::string, Benchmark>& registry() {
  static const std::map<std::string, Benchmark> benchmarks = {
      {"pool.resolve", poolResolve},
      {"pool.current_stream", poolCurrentStream},
      {"pool.get_stream_from_pool", poolGetStreamFromPool},
      {"pool.mixed_reader", poolMixedReader},
      {"pool.first_touch", poolFirstTouch},
      {"stub.round_trip", stubRoundTrip},
      {"stub.pipelined", stubPipelined},
      {"stub.idle_sync", stubIdleSync},
      {"stub.idle_device_sync", stubIdleDeviceSync},
      {"stub.overlap_2_streams",
       [](int64_t, int repeats) { return stubOverlap(poolStreams(2), 1, repeats); }},
      {"stub.overlap_32_streams",
       [](int64_t, int repeats) { return stubOverlap(poolStreams(kStreamsPerPool), 1, repeats); }},
      {"stub.card_launch_after_1m", stubCardLaunchAfterMillion},
      {"stub.same_stream_2_delays",
       [](int64_t, int repeats) { return stubOverlap(poolStreams(1), 2, repeats); }},
  };
  return benchmarks;
}

}  // namespace

BenchResult runBenchmark(const std::string& name, int64_t iterations, int repeats) {
  const auto& benchmarks = registry();
  auto it = benchmarks.find(name);
  TORCH_CHECK(it != benchmarks.end(), "unknown benchmark '", name, "'");
  TORCH_CHECK(iterations > 0 && repeats > 0, "benchmark '", name,
              "': iterations and repeats must be positive, got ", iterations, " and ", repeats);
  return it->second(iterations, repeats);
}

std::vector<std::string> benchmarkNames() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.push_back(entry.first);
  return names;
}

}  // namespace spyre
