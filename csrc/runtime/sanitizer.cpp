// The stream sanitizer's core (sanitizer.h).
#include "runtime/sanitizer.h"

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <flex/flex.hpp>

#include "runtime/capture.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre::sanitizer {
namespace detail {
std::atomic<int> g_mode{0};
std::atomic<int64_t> g_host_pending{0};
}  // namespace detail

namespace {

using Tick = uint64_t;

struct Clock {
  std::unordered_map<int64_t, Tick> ticks;
  Tick of(int64_t stream) const {
    auto it = ticks.find(stream);
    return it == ticks.end() ? 0 : it->second;
  }
  void merge(const Clock& other) {
    for (const auto& [stream, tick] : other.ticks) {
      Tick& mine = ticks[stream];
      mine = std::max(mine, tick);
    }
  }
};

using Interval = std::pair<uintptr_t, uintptr_t>;  // [first, last)

// Beyond this many elements a tensor's bytes are taken as one interval, its
// bounding range (a strided view that large is then treated as dense).
constexpr int64_t kExactElements = 1 << 16;

int64_t numel(const Bytes& b) {
  int64_t n = 1;
  for (int64_t s : b.sizes) n *= s;
  return n;
}

Interval bounds(const Bytes& b) {
  int64_t lo = 0;
  int64_t hi = 0;
  for (size_t k = 0; k < b.sizes.size(); ++k) {
    const int64_t span = (b.sizes[k] - 1) * b.strides[k];
    (span < 0 ? lo : hi) += span;
  }
  return {b.origin + lo * b.itemsize, b.origin + (hi + 1) * b.itemsize};
}

// Non-overlapping and dense (any dimension order): its bytes are its bounds.
bool dense(const Bytes& b) {
  c10::SmallVector<std::pair<int64_t, int64_t>, 5> dims;  // (|stride|, size)
  for (size_t k = 0; k < b.sizes.size(); ++k) {
    if (b.sizes[k] != 1) dims.emplace_back(std::abs(b.strides[k]), b.sizes[k]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// The tensor's bytes as sorted, merged intervals.
std::vector<Interval> intervals(const Bytes& b) {
  const int64_t n = numel(b);
  if (n == 0) return {};
  if (n > kExactElements || dense(b)) return {bounds(b)};
  std::vector<Interval> out;
  out.reserve(static_cast<size_t>(n));
  const size_t dims = b.sizes.size();
  c10::SmallVector<int64_t, 5> index(dims, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (size_t k = 0; k < dims; ++k) offset += index[k] * b.strides[k];
    const uintptr_t first = b.origin + offset * b.itemsize;
    out.emplace_back(first, first + b.itemsize);
    for (size_t k = dims; k-- > 0;) {
      if (++index[k] < b.sizes[k]) break;
      index[k] = 0;
    }
  }
  std::sort(out.begin(), out.end());
  std::vector<Interval> merged;
  for (const Interval& iv : out) {
    if (!merged.empty() && iv.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, iv.second);
    } else {
      merged.push_back(iv);
    }
  }
  return merged;
}

// The first bytes both hold, or {0, 0}.
Interval firstOverlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const uintptr_t first = std::max(a[i].first, b[j].first);
    const uintptr_t last = std::min(a[i].second, b[j].second);
    if (first < last) return {first, last};
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return {0, 0};
}

bool covers(const std::vector<Interval>& outer, const std::vector<Interval>& inner) {
  size_t i = 0;
  for (const Interval& iv : inner) {
    while (i < outer.size() && outer[i].second <= iv.first) ++i;
    if (i == outer.size() || outer[i].first > iv.first || outer[i].second < iv.second) return false;
  }
  return true;
}

// The host as the accessor of a report's later access (it has no stream id).
constexpr int64_t kHost = -1;

struct Record {
  std::vector<Interval> bytes;
  Interval span;
  std::string what;
  bool write;
  bool host_memory;  // Access::host
  int64_t stream;    // kHost: a host access (never recorded)
  Tick tick;
  std::string op;
  std::string stack;
};

struct State {
  std::mutex mutex;
  std::unordered_map<int64_t, Clock> streams;
  std::unordered_map<const void*, Clock> events;
  Clock host;
  std::vector<Record> records;

  Clock& stream(int64_t id) { return streams[id]; }

  // The host knows these finished: every later launch is ordered after them.
  void forgetCompleted() {
    records.erase(std::remove_if(records.begin(), records.end(),
                                 [&](const Record& r) { return host.of(r.stream) >= r.tick; }),
                  records.end());
    countHostRecords();
  }

  // After any change to `records` (with the lock held).
  void countHostRecords() {
    const auto n = std::count_if(records.begin(), records.end(),
                                 [](const Record& r) { return r.host_memory; });
    detail::g_host_pending.store(n, std::memory_order_relaxed);
  }
};

Reporting& reporting() {
  static Reporting r;
  return r;
}

std::atomic<int64_t> ordering_waits{0};
thread_local bool internal_thread = false;  // markInternalThread()

// The hazard tracker's edge: `later` waits (on the device) for everything
// launched on `earlier` so far.
void orderAfter(int64_t later, int64_t earlier) {
  const c10::DeviceIndex device = boundDevice();
  flex::RuntimeEvent done;  // its state lives on in the queued wait
  done.record(SpyreStream(spyre::detail::makeSpyreStream(device, earlier)).resolveRuntimeHandle());
  done.wait(SpyreStream(spyre::detail::makeSpyreStream(device, later)).resolveRuntimeHandle());
  ordering_waits.fetch_add(1, std::memory_order_relaxed);
}

State& state() {
  static auto* s = new State();  // leaked: launches may come during exit
  return *s;
}

std::string hex(uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

const char* kindOf(bool earlier_write, bool later_write) {
  if (earlier_write && later_write) return "write-after-write";
  return earlier_write ? "read-after-write" : "write-after-read";
}

// A stream as torch.spyre.Stream prints it (torch_spyre/streams.py), so a
// report names streams the way the user sees them.
std::string streamName(int64_t id) {
  const int priority = id >= kFirstHighPriorityStreamId && id < kNumPoolStreamIds ? kHighPriority
                                                                                 : kLowPriority;
  return "torch.spyre.Stream(device=spyre:" + std::to_string(boundDevice()) +
         ", id=" + std::to_string(id) + ", priority=" + std::to_string(priority) + ")";
}

// A stream in a line of code to write: the default stream by the call that
// returns it; any other as <its printed form>, standing for the user's own
// variable (the report never invents a name that could be another stream's).
std::string streamInCode(int64_t id) {
  return id == kDefaultStreamId ? "torch.spyre.default_stream()" : "<" + streamName(id) + ">";
}

std::string where(const Record& r) {
  return r.stream == kHost ? "on the host" : "on " + streamName(r.stream);
}

std::string report(const Record& earlier, const Record& later, Interval overlap) {
  std::ostringstream m;
  m << "spyre sanitizer: unsynchronized access (" << kindOf(earlier.write, later.write) << ")\n"
    << "  this access:    " << later.op << (later.write ? " writes " : " reads ") << later.what
    << " " << where(later) << "\n"
    << "  earlier access: " << earlier.op << (earlier.write ? " writes " : " reads ") << earlier.what
    << " " << where(earlier) << ", not ordered before it\n"
    << "  overlapping bytes: [" << hex(overlap.first) << ", " << hex(overlap.second) << ") ("
    << (overlap.second - overlap.first) << " bytes)\n"
    << "  earlier access launched at:\n"
    << (earlier.stack.empty() ? "    (no Python frames)\n" : earlier.stack)
    << "  this access launched at:\n"
    << (later.stack.empty() ? "    (no Python frames)\n" : later.stack);
  const std::string earlier_stream = streamInCode(earlier.stream);
  if (later.stream == kHost) {
    m << "  fix: the host must wait for the copy before this access: " << earlier_stream
      << ".synchronize() (or an Event recorded on it after the copy and that event's"
      << " synchronize(), or torch.spyre.synchronize())\n";
  } else if (later.stream == earlier.stream) {
    m << "  fix: the two accesses are on one stream; this cannot happen (a sanitizer bug)\n";
  } else {
    const std::string later_stream = streamInCode(later.stream);
    m << "  fix: " << streamName(later.stream) << " must wait for " << streamName(earlier.stream)
      << " before this access: " << later_stream << ".wait_stream(" << earlier_stream
      << ") (or an Event recorded on " << earlier_stream << " after the earlier access, waited"
      << " on with " << later_stream << ".wait_event(event)); if the earlier access's tensor was"
      << " freed, call its record_stream(" << earlier_stream << ") before freeing it\n";
  }
  return m.str();
}

}  // namespace

void setReporting(Reporting r) {
  reporting() = r;
}

void setMode(Mode m) {
  if (m == Mode::Off) reset();
  detail::g_mode.store(static_cast<int>(m), std::memory_order_relaxed);
}

Mode mode() {
  return static_cast<Mode>(detail::g_mode.load(std::memory_order_relaxed));
}

namespace {

// One launch on `stream_id` of the accesses `mine` (onLaunch, onLaunchAll).
void launchRecords(int64_t stream_id, std::vector<Record> mine, bool order,
                   const std::function<void()>& launch);

void addRecords(std::vector<Record>& mine, int64_t stream_id, const std::string& op,
                const std::vector<Access>& accesses, const std::string& stack) {
  for (const Access& a : accesses) {
    Record r{intervals(a.bytes), bounds(a.bytes), a.bytes.what, a.write, a.host, stream_id, 0, op,
             stack};
    if (!r.bytes.empty()) mine.push_back(std::move(r));
  }
}

// Before the lock: capturing a Python stack takes the GIL (no report to show
// it in when ordering).
std::string launchStack(bool order) {
  return reporting().stack != nullptr && !order ? reporting().stack() : std::string();
}

}  // namespace

void onLaunch(int64_t stream_id, const std::string& op, const std::vector<Access>& accesses,
              const std::function<void()>& launch) {
  // Captured work is recorded, not run: it accesses nothing now. Its graph
  // keeps the accesses and checks them at each replay (onLaunchAll).
  if (capture::anyCapture() && capture::noteAccesses(stream_id, op, accesses)) {
    try {
      launch();
    } catch (...) {
      capture::forgetNotedAccesses(stream_id);  // no node took them
      throw;
    }
    return;
  }
  if (!enabled()) {
    launch();
    return;
  }
  const bool order = mode() == Mode::Order;
  std::vector<Record> mine;
  mine.reserve(accesses.size());
  addRecords(mine, stream_id, op, accesses, launchStack(order));
  launchRecords(stream_id, std::move(mine), order, launch);
}

void onLaunchAll(int64_t stream_id,
                 const std::vector<std::pair<std::string, std::vector<Access>>>& launches,
                 const std::function<void()>& launch) {
  if (!enabled()) {
    launch();
    return;
  }
  const bool order = mode() == Mode::Order;
  const std::string stack = launchStack(order);
  std::vector<Record> mine;
  for (const auto& [op, accesses] : launches) addRecords(mine, stream_id, op, accesses, stack);
  launchRecords(stream_id, std::move(mine), order, launch);
}

namespace {

void launchRecords(int64_t stream_id, std::vector<Record> mine, bool order,
                   const std::function<void()>& launch) {
  std::string problem;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    Clock& clock = s.stream(stream_id);
    clock.merge(s.host);
    const Tick tick = clock.of(stream_id) + 1;
    std::vector<int64_t> waits;  // Mode::Order: the streams to wait for
    for (const Record& now : mine) {
      for (const Record& before : s.records) {
        if (!(now.write || before.write)) continue;
        if (clock.of(before.stream) >= before.tick) continue;  // ordered before
        if (before.stream == stream_id) continue;             // stream order
        if (before.host_memory != now.host_memory) continue;  // another address space
        if (before.span.second <= now.span.first || now.span.second <= before.span.first) continue;
        const Interval overlap = firstOverlap(before.bytes, now.bytes);
        if (overlap.first == overlap.second) continue;
        if (order) {  // wait for all that stream launched so far: this access included
          waits.push_back(before.stream);
          clock.merge(s.streams.at(before.stream));  // it launched: no insertion
          continue;
        }
        problem = report(before, now, overlap);
        break;
      }
      if (!problem.empty()) break;
    }
    if (!problem.empty() && mode() != Mode::Warn) {
      // Raised below: nothing is queued, nothing recorded.
    } else {
      // The waits before the access, then the access, then its record, all
      // under this lock: a launch checked after this one on this stream is
      // queued after the waits it relies on (the clock merged them), and an
      // event recorded after it covers it. A launch that raises leaves no
      // record behind to be reported against later accesses.
      for (const int64_t earlier : waits) orderAfter(stream_id, earlier);
      launch();
      clock.ticks[stream_id] = tick;
      for (Record& now : mine) {
        now.tick = tick;
        // A later access of the same stream that covers an earlier one takes
        // its place: anything racing with the earlier one races with it.
        s.records.erase(std::remove_if(s.records.begin(), s.records.end(),
                                       [&](const Record& r) {
                                         return r.stream == stream_id && (now.write || !r.write) &&
                                                r.host_memory == now.host_memory &&
                                                covers(now.bytes, r.bytes);
                                       }),
                        s.records.end());
        s.records.push_back(std::move(now));
      }
      s.countHostRecords();
    }
  }
  if (problem.empty()) return;
  if (mode() == Mode::Warn) {
    std::fputs(problem.c_str(), stderr);
    std::fflush(stderr);
    return;
  }
  if (reporting().raise != nullptr) reporting().raise(problem);
  throw std::runtime_error(problem);
}

}  // namespace

void onEventRecord(const void* event, int64_t stream) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Clock& clock = s.stream(stream);
  clock.merge(s.host);
  s.events[event] = clock;
}

void onStreamFollows(int64_t later, int64_t earlier) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Clock& before = s.stream(earlier);
  before.merge(s.host);
  const Clock copy = before;  // s.stream(later) may rehash the map
  s.stream(later).merge(copy);
}

void markInternalThread() {
  internal_thread = true;
}

void onStreamWaitEvent(int64_t stream, const void* event) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.events.find(event);
  if (it != s.events.end()) s.stream(stream).merge(it->second);
}

void onEventComplete(const void* event) {
  if (!enabled() || internal_thread) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.events.find(event);
  if (it == s.events.end()) return;
  s.host.merge(it->second);
  s.forgetCompleted();
}

void onEventDestroy(const void* event) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.events.erase(event);
}

void onBlockReleased(const void* event, const void* ptr, size_t size) {
  if (!enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.events.find(event);
  if (it == s.events.end()) return;
  const Clock& done = it->second;
  const auto first = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t last = first + size;
  s.records.erase(std::remove_if(s.records.begin(), s.records.end(),
                                 [&](const Record& r) {
                                   return !r.host_memory && r.span.first < last &&
                                          first < r.span.second && done.of(r.stream) >= r.tick;
                                 }),
                  s.records.end());
}

void onHostAccess(const std::string& op, const std::vector<Access>& accesses) {
  if (!hostPending() || internal_thread) return;
  const Mode m = mode();
  if (m != Mode::Raise && m != Mode::Warn) return;
  std::vector<Record> mine;
  for (const Access& a : accesses) {
    Record r{intervals(a.bytes), bounds(a.bytes), a.bytes.what, a.write, true, kHost, 0, op, ""};
    if (!r.bytes.empty()) mine.push_back(std::move(r));
  }
  // The racing pair, copied out of the lock: the stack of this access is
  // captured only for a report (it takes the GIL).
  std::optional<Record> earlier;
  std::optional<Record> later;
  Interval overlap{0, 0};
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const Record& now : mine) {
      for (auto it = s.records.begin(); it != s.records.end(); ++it) {
        const Record& before = *it;
        if (!before.host_memory || !(now.write || before.write)) continue;
        if (s.host.of(before.stream) >= before.tick) continue;  // the host waited for it
        if (before.span.second <= now.span.first || now.span.second <= before.span.first) continue;
        overlap = firstOverlap(before.bytes, now.bytes);
        if (overlap.first == overlap.second) continue;
        earlier = before;
        later = now;
        if (m == Mode::Warn) {  // once per pending copy
          s.records.erase(it);
          s.countHostRecords();
        }
        break;
      }
      if (earlier) break;
    }
  }
  if (!earlier) return;
  if (reporting().stack != nullptr) later->stack = reporting().stack();
  const std::string problem = report(*earlier, *later, overlap);
  if (m == Mode::Warn) {
    std::fputs(problem.c_str(), stderr);
    std::fflush(stderr);
    return;
  }
  if (reporting().raise != nullptr) reporting().raise(problem);
  throw std::runtime_error(problem);
}

void onHostBlockAllocated(const void* ptr, size_t size) {
  if (!hostPending()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto first = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t last = first + size;
  s.records.erase(std::remove_if(s.records.begin(), s.records.end(),
                                 [&](const Record& r) {
                                   return r.host_memory && r.span.first < last &&
                                          first < r.span.second;
                                 }),
                  s.records.end());
  s.countHostRecords();
}

void onStreamComplete(int64_t stream) {
  if (!enabled() || internal_thread) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.host.merge(s.stream(stream));
  s.forgetCompleted();
}

void onDeviceComplete() {
  if (!enabled() || internal_thread) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (const auto& [id, clock] : s.streams) s.host.merge(clock);
  s.forgetCompleted();
}

int64_t orderingWaits() {
  return ordering_waits.load(std::memory_order_relaxed);
}

void lockForFork() {
  state().mutex.lock();
}

void unlockAfterFork() {
  state().mutex.unlock();
}

void reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.streams.clear();
  s.events.clear();
  s.host = Clock();
  s.records.clear();
  s.countHostRecords();
}

}  // namespace spyre::sanitizer
