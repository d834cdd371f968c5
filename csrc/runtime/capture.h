// Stream capture (docs/graphs.md): while a graph captures, the operations
// launched on its streams are recorded into a flex::RuntimeGraph instead of
// being queued, and whatever would make the host wait for (or read) captured
// work is refused.
//
// Streams in a capture. capture_begin() puts the current stream in; a stream
// that waits on an event recorded on a capturing stream joins the capture (a
// fork); the origin stream waiting on an event recorded on a joined stream
// joins it back. end() checks that everything launched during the capture is
// ordered before the origin stream's end (CUDA's "unjoined" error otherwise)
// and takes every stream out.
//
// Order. Nodes are appended in launch order, across streams, under one lock: a
// node that waited (through an event) for another stream's work was launched
// after it, so launch order is a valid order of the dependencies, and a replay
// runs the nodes in it, on one engine, as one operation. Dependencies are kept
// per node for debug_dump's picture.
//
// Refusals (what conflicts with capture raises RuntimeError before anything
// is queued, invalidates the capture, and leaves device, streams and allocator
// usable). Invalidation is sticky, as CUDA's: the streams stay in the capture,
// every launch, event record or wait on them raises naming the invalidation,
// nothing runs, and end() raises too; other threads' host waits are no longer
// refused by it (it records nothing more).
//   - on a capturing stream, always: host<->device copies, host callbacks,
//     delays, ops that run at the call, random ops, synchronize and query of
//     the stream or of an event recorded in the capture;
//   - other host waits (another stream's or an event's synchronize or query,
//     synchronize of the device), by the capture's mode: Global refuses them
//     from any thread, ThreadLocal from the capturing thread, Relaxed allows
//     them (at::GraphCaptureMode; Default is Global, as on CUDA).
//
// Cost when no graph captures: one relaxed load at each launch site.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <c10/core/Storage.h>
#include <c10/core/Stream.h>
#include <flex/flex.hpp>

#include "runtime/sanitizer.h"

namespace spyre::capture {

enum class Mode : int8_t { Global, ThreadLocal, Relaxed };

// One captured operation, for debug_dump and the sanitizer.
struct Node {
  std::string name;  // as the profiler names it: "aten::add.out", "D2D", "fill"
  c10::StreamId stream;
  size_t bytes;
  std::vector<size_t> deps;  // earlier nodes it waits for (stream order, events)
  // What it reads and writes, as its launch described it to the sanitizer
  // (sanitizer::onLaunch): a replay checks these as if each node were launched.
  std::string op;  // as the sanitizer names it: "aten::add_.Tensor", "D2D"
  std::vector<sanitizer::Access> accesses;
};

// One capture, owned by the graph that began it. Filled under the capture lock.
struct Capture {
  flex::RuntimeGraph graph;
  std::vector<Node> nodes;
  c10::StreamId origin = 0;
  Mode mode = Mode::Global;
  std::thread::id thread;
  std::pair<uint64_t, uint64_t> pool{0, 0};  // the allocator's private pool
  // Per stream in the capture: its last node (or none) and what it waited for
  // since (events), which the next node of the stream depends on.
  struct StreamState {
    c10::StreamId id;
    std::optional<size_t> last;
    std::vector<size_t> pending;
    // The accesses the stream's next node's launch described (noteAccesses).
    std::optional<std::pair<std::string, std::vector<sanitizer::Access>>> noted;
  };
  std::vector<StreamState> streams;
  // The storages of what the captured work uses that the capture did not
  // allocate: the graph keeps them alive, so no replay reads freed memory.
  std::vector<c10::Storage> inputs;
  std::unordered_set<const c10::StorageImpl*> input_impls;  // the same, to find one at once
  bool active = false;
  std::string invalidated;  // why an operation invalidated the capture (sticky)
};

namespace detail {
extern std::atomic<int> g_active;
}  // namespace detail

// The launch sites' check: false unless some capture is in progress.
inline bool anyCapture() { return detail::g_active.load(std::memory_order_relaxed) != 0; }

// Puts `stream` in `capture` (which must outlive the capture). Raises when the
// stream is already capturing.
void begin(Capture& capture, c10::StreamId stream, Mode mode, std::pair<uint64_t, uint64_t> pool);
// Takes every stream out of the capture. Raises, naming the reason, when an
// operation invalidated it or work of a joined stream was never joined back.
void end(Capture& capture);
// Ends the capture, if still in progress, without raising (a graph's reset).
void abandon(Capture& capture) noexcept;

bool isCapturing(c10::StreamId stream);
// The private pool allocations on `stream` come from while it captures, or {0, 0}.
std::pair<uint64_t, uint64_t> poolOf(c10::StreamId stream);

// The launch sites: true when `stream` is capturing and the operation was
// recorded instead of queued. `fn` is called once per replay. When
// `record_as` is given, it is called instead, under the capture lock, only
// when the operation is recorded, and what it returns is recorded in place of
// `fn` (no replay can start before it returns).
bool recordCompute(c10::StreamId stream, const std::function<void()>& fn, const char* name,
                   size_t bytes,
                   const std::function<std::function<void()>()>* record_as = nullptr);
bool recordD2D(c10::StreamId stream, const flex::D2DParams& params);
bool recordFill(c10::StreamId stream, const flex::CompositeAddress& address, double value,
                flex::DataFormats format);

// A launch on `stream` describes its accesses (sanitizer::onLaunch, just
// before it is launched): true when `stream` is capturing, and they belong to
// the node recorded next on it.
bool noteAccesses(c10::StreamId stream, const std::string& op,
                  const std::vector<sanitizer::Access>& accesses);
// The launch that noted them raised: no node takes them.
void forgetNotedAccesses(c10::StreamId stream) noexcept;

// Work recorded on `stream` uses `storage`, which its capture did not
// allocate: the capture (then its graph) keeps it alive. Nothing when
// `stream` is not capturing.
void holdInput(c10::StreamId stream, const c10::Storage& storage);

// `what` cannot be captured: when `stream` is capturing, invalidates its
// capture and raises "spyre: <what> cannot be captured: stream id=N is
// capturing a graph ...".
void refuseIfCapturing(c10::StreamId stream, const std::string& what);
// A host wait: on `stream` (or the device when `stream` is null), applying the
// modes above.
void checkCaptureAllowsHostWait(const c10::StreamId* stream, const char* what);

// Events. recordEvent: true when `stream` is capturing (the record is part of
// the capture, nothing is queued). waitEvent: true when `event` was recorded
// in a capture (the wait is a dependency; a waiting stream outside the capture
// joins it); raises when a capturing stream waits on an event recorded
// outside its capture. checkEventHostUse: refuses a query or synchronize of an
// event recorded in a capture.
bool recordEvent(const void* event, c10::StreamId stream);
bool waitEvent(const void* event, c10::StreamId stream);
void checkEventHostUse(const void* event, const char* what);
void forgetEvent(const void* event) noexcept;

}  // namespace spyre::capture
