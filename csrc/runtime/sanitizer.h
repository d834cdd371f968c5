// The stream sanitizer's core (docs/sanitizer.md): which device bytes each
// queued operation reads and writes, and what is ordered before what.
//
// Ordering is a vector clock per stream: every operation queued on stream s
// ticks s's own entry and is stamped (s, tick). Waiting for an event merges the
// clock the event captured at its record; a host wait (stream, event or device
// synchronize, a query that answers "done") merges into the host's clock, and
// every later launch on any stream merges the host's clock first. An earlier
// access (s, e) is ordered before a later one on stream t iff t's clock holds
// s >= e. Two accesses to overlapping bytes, at least one a write, that are not
// ordered are a race, reported when the later one is launched (on the host, at
// the call: deterministic, whatever the engines do).
//
// Accesses are kept by byte address, not by tensor or storage, and are kept
// when the memory is freed: a block handed to a new owner while an earlier
// access on another stream is not ordered before the new owner's access is a
// race like any other. An access is forgotten once the host knows it finished,
// a later access of its own stream covers it, or the allocator, having seen
// the event recorded for it complete, hands its block on (onBlockReleased).
// What the allocator observes orders nothing else: reports do not depend on
// when its queries happen to run.
//
// No ATen or Python here (the runtime layer): callers describe tensors as
// strided byte sets (launch/sanitizer_accesses.h), and the Python layer installs
// how a launch's stack is captured and a report is raised
// (python/sanitizer_bindings.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/SmallVector.h>

namespace spyre::sanitizer {

// Order: the hazard tracker (SPYRE_HAZARD_TRACKER=1, as upstream's): no
// report; the launching stream is made to wait for each stream whose earlier
// access it races with, so racy programs compute what their program order
// says.
enum class Mode : int { Off = 0, Raise = 1, Warn = 2, Order = 3 };

namespace detail {
extern std::atomic<int> g_mode;
}  // namespace detail

// The only cost when the sanitizer is off: one relaxed load per launch.
inline bool enabled() {
  return detail::g_mode.load(std::memory_order_relaxed) != 0;
}

void setMode(Mode mode);
Mode mode();

// How the launching thread's stack is described ("    file.py:12 in f\n" per
// frame, innermost last), and how a report is raised in Mode::Raise. Without
// them: no stack, and a std::runtime_error.
struct Reporting {
  std::string (*stack)() = nullptr;
  void (*raise)(const std::string& report) = nullptr;  // must throw
};
void setReporting(Reporting reporting);

// The bytes of one tensor: elements of `itemsize` bytes at
// origin + sum(index_k * strides_k) * itemsize.
struct Bytes {
  uintptr_t origin = 0;
  int64_t itemsize = 0;
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  std::string what;  // "float32[4, 4]"
};

// `host`: the bytes are host memory (the pinned side of a non_blocking copy,
// or what a CPU op touches), compared only with other host bytes.
struct Access {
  Bytes bytes;
  bool write = false;
  bool host = false;
};

// The launch of an operation named `op` (as the profiler names it:
// "aten::mul.Tensor", "H2D", ...) on stream `stream`: `launch` queues it.
// Raises (Mode::Raise) or prints (Mode::Warn) a report when an access races
// with an earlier one; nothing is queued then in raise mode. In Mode::Order,
// queues the waits that order it instead. The check, the waits, `launch` and
// the record are one step under the tracker's lock: a launch on the same
// stream from another thread is checked before or after all of it, and what
// the clocks say was launched was queued. When `launch` raises, nothing is
// recorded. `launch` only queues: it must not call into the sanitizer or take
// the GIL (it runs under the tracker's lock).
void onLaunch(int64_t stream, const std::string& op, const std::vector<Access>& accesses,
              const std::function<void()>& launch);
// The same for operations (op, accesses) launched together as one, in order (a
// graph replay): all are checked before any is recorded, so a report leaves
// none recorded.
void onLaunchAll(int64_t stream,
                 const std::vector<std::pair<std::string, std::vector<Access>>>& launches,
                 const std::function<void()>& launch);

// The host side of copies: a non_blocking copy's pinned host bytes are an
// access of its stream like its device bytes (onLaunch, Access::host), and
// stay pending until the host's clock covers the copy (a host wait ordered
// it). The host itself is a pseudo-stream whose clock is the host clock: its
// accesses (a CPU op, numpy()) race with a pending copy's host bytes when
// either writes. Host accesses are not recorded: every later launch is
// ordered after them.
namespace detail {
extern std::atomic<int64_t> g_host_pending;
}  // namespace detail

// Whether any copy's host bytes are pending (a relaxed load).
inline bool hostPending() {
  return detail::g_host_pending.load(std::memory_order_relaxed) != 0;
}

// A CPU operation `op` (aten::add.Tensor, numpy()) accessing host memory on
// the calling thread: reported (Mode::Raise, Mode::Warn) when it races with a
// pending copy's host bytes. Warn mode reports each pending copy once.
void onHostAccess(const std::string& op, const std::vector<Access>& accesses);

// The pinned host allocator handed [ptr, ptr + size) to a new owner: the
// copies it waited for (its events) ran, and their host bytes are forgotten.
void onHostBlockAllocated(const void* ptr, size_t size);

// The calling thread is a library's own (spyreccl's progress threads): its
// host waits order nothing for the program, so they are not ordering edges
// (reports must not depend on when those threads happen to wait).
void markInternalThread();

// Waits the hazard tracker inserted since the process started.
int64_t orderingWaits();

// Ordering edges.
void onEventRecord(const void* event, int64_t stream);
// `later` is ordered after what `earlier` launched so far (an event recorded
// on `earlier` and waited on by `later`, as one step).
void onStreamFollows(int64_t later, int64_t earlier);
void onStreamWaitEvent(int64_t stream, const void* event);
void onEventComplete(const void* event);  // synchronize, or a query that answered true
void onEventDestroy(const void* event);
// The caching allocator found `event` complete and may hand the block at
// [ptr, ptr + size) to a new owner: the block's accesses the event covers are
// over and are forgotten. Nothing else is ordered by it: the allocator's
// query is not the program's, and what it happens to observe must not hide a
// race elsewhere.
void onBlockReleased(const void* event, const void* ptr, size_t size);
void onStreamComplete(int64_t stream);  // synchronize, or a query that answered true
void onDeviceComplete();

// Forgets every access and clock (tests; the runtime's restart).
void reset();

// fork(): the tracker's lock is taken after the allocators' locks before
// fork() and released after it in parent and child, so a child never inherits
// it held by a thread that does not exist there (device/fork_gate.cpp). Under
// it a launch takes only the capture's and the runtime's locks, never an
// allocator's; the runtime's own fork handler runs after this one.
void lockForFork();
void unlockAfterFork();

}  // namespace spyre::sanitizer
