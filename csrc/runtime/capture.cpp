#include "runtime/capture.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include <c10/util/Exception.h>

#include "runtime/stream.h"

namespace spyre::capture {

std::atomic<int> detail::g_active{0};

namespace {

// An event recorded on a capturing stream: what a stream waiting on it then
// depends on.
struct EventMark {
  Capture* capture;
  std::vector<size_t> frontier;
};

// Everything below is guarded by mutex(). Captures are rare: one lock, taken
// only while some capture is in progress (anyCapture()).
struct Registry {
  std::mutex mutex;
  std::array<Capture*, kMaxStreamIds> by_stream{};
  std::vector<Capture*> active;
  std::unordered_map<const void*, EventMark> events;
};

Registry& registry() {
  static auto* instance = new Registry();  // leaked: used at exit
  return *instance;
}

Capture* captureOfLocked(Registry& r, c10::StreamId stream) {
  if (stream < 0 || stream >= kMaxStreamIds) return nullptr;
  return r.by_stream[static_cast<size_t>(stream)];
}

Capture::StreamState& stateOf(Capture& capture, c10::StreamId stream) {
  for (Capture::StreamState& state : capture.streams) {
    if (state.id == stream) return state;
  }
  return capture.streams.emplace_back(Capture::StreamState{stream, std::nullopt, {}});
}

std::vector<size_t> frontierOf(const Capture::StreamState& state) {
  std::vector<size_t> frontier = state.pending;
  if (state.last) frontier.push_back(*state.last);
  return frontier;
}

void takeOutLocked(Registry& r, Capture& capture) {
  for (const Capture::StreamState& state : capture.streams) {
    if (captureOfLocked(r, state.id) == &capture) {
      r.by_stream[static_cast<size_t>(state.id)] = nullptr;
    }
  }
  for (auto it = r.events.begin(); it != r.events.end();) {
    it = it->second.capture == &capture ? r.events.erase(it) : std::next(it);
  }
  r.active.erase(std::remove(r.active.begin(), r.active.end(), &capture), r.active.end());
  if (capture.active) {
    capture.active = false;
    detail::g_active.fetch_sub(1, std::memory_order_relaxed);
  }
}

// Invalidates `capture` and returns the message to raise. Sticky: its streams
// stay in it, and whatever is launched on them raises (invalidatedError) until
// end() takes them out (CUDA's cudaErrorStreamCaptureInvalidated).
std::string invalidateLocked(Registry& /*r*/, Capture& capture, const std::string& why) {
  capture.invalidated = why;
  return "spyre: " + why + "; the capture is invalidated (work launched on its streams raises " +
         "until capture_end, which raises too; the graph holds nothing: capture again)";
}

// What raises for `what` on `stream`, whose capture was invalidated: nothing
// runs there until capture_end.
std::string invalidatedError(const Capture& capture, c10::StreamId stream, const std::string& what) {
  return "spyre: " + what + " on stream id=" + std::to_string(stream) +
         " cannot run: the stream's capture was invalidated (" + capture.invalidated +
         "); nothing runs on it until capture_end, which raises";
}

// The same for `what` on an event recorded in an invalidated capture (it
// stands for nothing: the work it followed never runs).
std::string invalidatedUse(const Capture& capture, const std::string& what) {
  return "spyre: " + what + " of an event recorded in a capture that was invalidated (" +
         capture.invalidated + ") is not allowed: the event stands for nothing that runs";
}

// Raises (the lock released first) when `capture` was invalidated.
void raiseIfInvalidated(std::unique_lock<std::mutex>& lock, const Capture& capture,
                        c10::StreamId stream, const std::string& what) {
  if (capture.invalidated.empty()) return;
  std::string message = invalidatedError(capture, stream, what);
  lock.unlock();
  TORCH_CHECK(false, message);
}

void addNodeLocked(Capture& capture, c10::StreamId stream, const char* name, size_t bytes) {
  Capture::StreamState& state = stateOf(capture, stream);
  const size_t index = capture.nodes.size();
  Node& node = capture.nodes.emplace_back(
      Node{name != nullptr ? name : "compute", stream, bytes, frontierOf(state), {}, {}});
  if (state.noted) {
    node.op = std::move(state.noted->first);
    node.accesses = std::move(state.noted->second);
    state.noted.reset();
  }
  state.last = index;
  state.pending.clear();
}

const char* modeName(Mode mode) {
  switch (mode) {
    case Mode::Global: return "global";
    case Mode::ThreadLocal: return "thread_local";
    case Mode::Relaxed: return "relaxed";
  }
  return "?";
}

}  // namespace

void begin(Capture& capture, c10::StreamId stream, Mode mode,
           std::pair<uint64_t, uint64_t> pool) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  TORCH_CHECK(stream >= 0 && stream < kMaxStreamIds, "spyre: capture_begin: stream id ", stream,
              " is not a spyre stream id");
  TORCH_CHECK(captureOfLocked(r, stream) == nullptr, "spyre: capture_begin: stream id=", stream,
              " is already capturing a graph");
  capture.graph = flex::RuntimeGraph();
  capture.nodes.clear();
  capture.origin = stream;
  capture.mode = mode;
  capture.thread = std::this_thread::get_id();
  capture.pool = pool;
  capture.streams.assign(1, Capture::StreamState{stream, std::nullopt, {}});
  capture.invalidated.clear();
  capture.inputs.clear();
  capture.input_impls.clear();
  capture.active = true;
  r.by_stream[static_cast<size_t>(stream)] = &capture;
  r.active.push_back(&capture);
  detail::g_active.fetch_add(1, std::memory_order_relaxed);
}

void end(Capture& capture) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  if (!capture.invalidated.empty()) {
    takeOutLocked(r, capture);
    lock.unlock();
    TORCH_CHECK(false, "spyre: capture_end: the capture was invalidated: ", capture.invalidated);
  }
  TORCH_CHECK(capture.active, "spyre: capture_end: no capture in progress");
  // Everything captured must be ordered before the origin stream's end.
  std::vector<bool> joined(capture.nodes.size(), false);
  std::vector<size_t> todo = frontierOf(stateOf(capture, capture.origin));
  while (!todo.empty()) {
    const size_t node = todo.back();
    todo.pop_back();
    if (joined[node]) continue;
    joined[node] = true;
    for (const size_t dep : capture.nodes[node].deps) todo.push_back(dep);
  }
  std::vector<c10::StreamId> unjoined;
  for (size_t i = 0; i < capture.nodes.size(); ++i) {
    const c10::StreamId stream = capture.nodes[i].stream;
    if (!joined[i] && std::find(unjoined.begin(), unjoined.end(), stream) == unjoined.end()) {
      unjoined.push_back(stream);
    }
  }
  const c10::StreamId origin = capture.origin;
  takeOutLocked(r, capture);
  if (!unjoined.empty()) {
    capture.invalidated = "work of a stream that joined it was not joined back";
    lock.unlock();
    std::string streams;
    for (const c10::StreamId id : unjoined) {
      streams += (streams.empty() ? "id=" : ", id=") + std::to_string(id);
    }
    TORCH_CHECK(false, "spyre: capture_end: work captured on stream ", streams,
                " is not joined back into the capturing stream id=", origin,
                ": make the capturing stream wait for it (capturing.wait_stream(other)) before "
                "the capture ends");
  }
}

void abandon(Capture& capture) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  takeOutLocked(r, capture);
}

bool isCapturing(c10::StreamId stream) {
  if (!anyCapture()) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return captureOfLocked(r, stream) != nullptr;
}

std::pair<uint64_t, uint64_t> poolOf(c10::StreamId stream) {
  if (!anyCapture()) return {0, 0};
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const Capture* capture = captureOfLocked(r, stream);
  return capture != nullptr ? capture->pool : std::pair<uint64_t, uint64_t>{0, 0};
}

bool recordCompute(c10::StreamId stream, const std::function<void()>& fn, const char* name,
                   size_t bytes, const std::function<std::function<void()>()>* record_as) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return false;
  raiseIfInvalidated(lock, *capture, stream, name != nullptr ? name : "compute");
  flex::ComputeParams params;
  params.fn = record_as != nullptr && *record_as ? (*record_as)() : fn;
  params.name = name != nullptr ? name : "compute";
  params.bytes = bytes;
  capture->graph.addCompute(&params);
  addNodeLocked(*capture, stream, name, bytes);
  return true;
}

bool recordD2D(c10::StreamId stream, const flex::D2DParams& params) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return false;
  raiseIfInvalidated(lock, *capture, stream, "a device-to-device copy");
  capture->graph.addD2D(&params);
  addNodeLocked(*capture, stream, "D2D", params.size);
  return true;
}

bool recordFill(c10::StreamId stream, const flex::CompositeAddress& address, double value,
                flex::DataFormats format) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return false;
  raiseIfInvalidated(lock, *capture, stream, "a fill");
  capture->graph.addFill(&address, value, format);
  addNodeLocked(*capture, stream, "fill", address.total_size());
  return true;
}

bool noteAccesses(c10::StreamId stream, const std::string& op,
                  const std::vector<sanitizer::Access>& accesses) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return false;
  stateOf(*capture, stream).noted.emplace(op, accesses);
  return true;
}

void forgetNotedAccesses(c10::StreamId stream) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return;
  for (Capture::StreamState& state : capture->streams) {
    if (state.id == stream) state.noted.reset();
  }
}

void holdInput(c10::StreamId stream, const c10::Storage& storage) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) return;
  if (!capture->input_impls.insert(storage.unsafeGetStorageImpl()).second) return;
  capture->inputs.push_back(storage);  // released by the graph, never under this lock
}

void refuseIfCapturing(c10::StreamId stream, const std::string& what) {
  if (!anyCapture()) return;
  Registry& r = registry();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    Capture* capture = captureOfLocked(r, stream);
    if (capture == nullptr) return;
    message = !capture->invalidated.empty()
                  ? invalidatedError(*capture, stream, what)
                  : invalidateLocked(r, *capture,
                                     what + " cannot be captured: stream id=" +
                                         std::to_string(stream) + " is capturing a graph");
  }
  TORCH_CHECK(false, message);
}

void checkCaptureAllowsHostWait(const c10::StreamId* stream, const char* what) {
  if (!anyCapture()) return;
  Registry& r = registry();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    Capture* own = stream != nullptr ? captureOfLocked(r, *stream) : nullptr;
    if (own != nullptr && !own->invalidated.empty()) {
      message = invalidatedError(*own, *stream, what);
    } else if (own != nullptr) {
      message = invalidateLocked(r, *own,
                                 std::string(what) + " of stream id=" + std::to_string(*stream) +
                                     " is not allowed while it is capturing a graph (the host "
                                     "would wait for work that is recorded, not queued)");
    } else {
      for (Capture* capture : r.active) {
        // An invalidated capture records nothing more: nothing to protect.
        const bool refused =
            capture->invalidated.empty() && (capture->mode == Mode::Global ||
             (capture->mode == Mode::ThreadLocal &&
              capture->thread == std::this_thread::get_id()));
        if (!refused) continue;
        message = invalidateLocked(
            r, *capture,
            std::string(what) + " is not allowed while stream id=" +
                std::to_string(capture->origin) + " is capturing a graph in capture_error_mode '" +
                modeName(capture->mode) + "' ('relaxed' allows host waits on other streams)");
        break;
      }
      if (message.empty()) return;
    }
  }
  TORCH_CHECK(false, message);
}

bool recordEvent(const void* event, c10::StreamId stream) {
  Registry& r = registry();
  std::unique_lock<std::mutex> lock(r.mutex);
  Capture* capture = captureOfLocked(r, stream);
  if (capture == nullptr) {
    r.events.erase(event);  // recorded again outside the capture
    return false;
  }
  raiseIfInvalidated(lock, *capture, stream, "an event record");
  r.events[event] = EventMark{capture, frontierOf(stateOf(*capture, stream))};
  return true;
}

bool waitEvent(const void* event, c10::StreamId stream) {
  Registry& r = registry();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    Capture* waiting = captureOfLocked(r, stream);
    const auto it = r.events.find(event);
    if (waiting != nullptr && !waiting->invalidated.empty()) {
      message = invalidatedError(*waiting, stream, "a wait on an event");
    } else if (it != r.events.end() && !it->second.capture->invalidated.empty()) {
      message = invalidatedUse(*it->second.capture, "a wait of stream id=" + std::to_string(stream));
    } else if (it == r.events.end()) {
      if (waiting == nullptr) return false;
      message = invalidateLocked(
          r, *waiting,
          "stream id=" + std::to_string(stream) +
              " is capturing a graph and cannot wait on an event recorded outside the capture "
              "(order it before capture_begin instead)");
    } else if (waiting != nullptr && waiting != it->second.capture) {
      message = invalidateLocked(r, *waiting,
                                 "stream id=" + std::to_string(stream) +
                                     " cannot wait on an event recorded in another graph's capture");
    } else {
      Capture& capture = *it->second.capture;
      if (waiting == nullptr) r.by_stream[static_cast<size_t>(stream)] = &capture;  // a fork
      Capture::StreamState& state = stateOf(capture, stream);
      const std::vector<size_t> frontier = it->second.frontier;
      state.pending.insert(state.pending.end(), frontier.begin(), frontier.end());
      return true;
    }
  }
  TORCH_CHECK(false, message);
}

void checkEventHostUse(const void* event, const char* what) {
  if (!anyCapture()) return;
  Registry& r = registry();
  std::string message;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.events.find(event);
    if (it == r.events.end()) return;
    if (!it->second.capture->invalidated.empty()) {
      message = invalidatedUse(*it->second.capture, std::string(what));
    } else {
      message = invalidateLocked(r, *it->second.capture,
                               std::string(what) +
                                   " of an event recorded during a capture is not allowed (the "
                                   "event stands for recorded work, not queued work)");
    }
  }
  TORCH_CHECK(false, message);
}

void forgetEvent(const void* event) noexcept {
  if (!anyCapture()) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.events.erase(event);
}

}  // namespace spyre::capture
