// SpyreStream and the StreamPool.
//
// Stream pool note (docs/streams.md has the full version and the diagram)
// ------------------------------------------------------------------------
// Ownership. flex::RuntimeContext (GlobalRuntime::get()) creates and owns every
// flex::RuntimeStream. The StreamPool keeps *non-owning* flex::RuntimeStream*
// in stream_handle_map, keyed by c10::StreamId alone (one device per process).
// SpyreStream is a value type over c10::Stream: it holds no handle and resolves
// it through the map on every operation.
//
// Ids. 0 is the default stream, mapped when the pool is initialized (at runtime
// start). 1..32 are the low-priority pool (priority >= 0, flex NORMAL), 33..64
// the high-priority pool (priority < 0, flex HIGH). getStreamFromPool hands ids
// out round robin per pool, so the 33rd request of a pool returns the first id
// again: the two share one flex stream and their work serializes. Prefer many
// short-lived streams to holding on to one; the hand-out is cheap.
// 65..65+N-1 are the host-compute streams (upstream's, after the note): N from
// TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS (default 4, 1..8), flex NORMAL, all
// created and mapped when the pool is initialized, handed out round robin by
// getHostComputeStream().
//
// Locking. StreamPool::mutex is a std::shared_mutex:
//   shared_lock  resolveRuntimeHandle(),
//                synchronizeDeviceOrThrow() (snapshot the handles, release, then sync)
//   unique_lock  initializeStreamPoolImpl(), getStreamFromPool() (it always
//                advances the round-robin index; it inserts a handle on an id miss),
//                getHostComputeStream() (its round-robin index, as upstream)
// The lock guards the map only, never submission of work: concurrent launches
// onto the same flex stream are serialized by the runtime (the stub is thread
// safe), not by this lock. No call that can block runs under the write lock: a
// missing flex stream is created outside it (once per id) and then inserted.
// Fork: a parent thread may hold the lock at fork(). Every entry point checks
// the device (or the fork) before taking it, which raises in a forked child.
//
// Invariants. The map is append-only; an id, once mapped, always maps to the
// same flex::RuntimeStream*; the pool never deletes a flex stream.
//
// Handle cache. resolveRuntimeHandle() keeps a per-thread read-through cache
// of handles by id in front of its shared_lock lookup: a thread takes the lock
// only the first time it resolves an id. The invariants above make a cached
// handle always equal to what the lookup would return; unknown ids are never
// cached (they raise every time).
//
// Current stream. Per thread (thread_local), starting at the default stream.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <c10/core/Stream.h>
#include <c10/macros/Macros.h>
#include <flex/flex.hpp>

#include "runtime/runtime.h"

namespace spyre {

enum class SpyreStreamError : int;  // runtime/error.h

constexpr int kStreamsPerPool = 32;
constexpr c10::StreamId kDefaultStreamId = 0;
constexpr c10::StreamId kFirstLowPriorityStreamId = 1;
constexpr c10::StreamId kFirstHighPriorityStreamId = kFirstLowPriorityStreamId + kStreamsPerPool;
constexpr c10::StreamId kNumPoolStreamIds = kFirstHighPriorityStreamId + kStreamsPerPool;
constexpr c10::StreamId kFirstHostComputeStreamId = kNumPoolStreamIds;
constexpr int kDefaultHostComputeStreams = 4;
constexpr int kMaxHostComputeStreams = 8;
// Every id that can have a flex handle is below this: 0..72.
constexpr c10::StreamId kMaxStreamIds = kFirstHostComputeStreamId + kMaxHostComputeStreams;
// Priorities as reported by SpyreStream::priority() (CUDA's convention).
constexpr int kLowPriority = 0;
constexpr int kHighPriority = -1;
// launchDelay's upper bound: the runtime counts int64 nanoseconds (~106 days).
constexpr double kMaxDelayMilliseconds = 9.2e12;

// What the runtime does with a pooled operation's state (launch/queued_op.h)
// besides running `fn` (which owns nothing): `on_discard(arg)` releases it
// when the runtime discards the operation unrun (its stream failed first);
// when the stream is capturing, `record_as()` is called instead, under the
// capture's lock, and the graph records what it returns (a function that
// owns the state and runs it at every replay).
struct ComputeRelease {
  void (*on_discard)(void*) = nullptr;
  void* arg = nullptr;
  std::function<std::function<void()>()> record_as;
};

class SpyreStream {
 public:
  // Checked: `stream` must be a PrivateUse1 (spyre) stream. Inline: every
  // stream operation constructs one.
  explicit SpyreStream(c10::Stream stream) : stream_(stream) {
    if (C10_UNLIKELY(stream.device_type() != c10::DeviceType::PrivateUse1)) {
      throwNotSpyreStream(stream);
    }
  }

  c10::Stream unwrap() const { return stream_; }
  operator c10::Stream() const { return stream_; }
  c10::StreamId id() const { return stream_.id(); }
  c10::Device device() const { return stream_.device(); }
  c10::DeviceIndex device_index() const { return stream_.device_index(); }
  // 0 for the default stream and the low-priority pool, -1 for the
  // high-priority pool: derived from the id, not stored.
  int priority() const;

  // The flex stream behind this id: a shared_lock lookup the first time the
  // calling thread resolves the id, then the thread's cached copy. Raises
  // "no flex handle for stream id N" for an id the pool never mapped.
  // Inline (below): every launch resolves its stream.
  flex::RuntimeStream* resolveRuntimeHandle() const;
  // The same for a stream of a device this op checked (no second check).
  flex::RuntimeStream* resolveRuntimeHandle(CheckedDevice device) const;

  // True iff all work launched on the stream has finished. Runtime errors
  // propagate unwrapped.
  bool query() const;
  // Block until all work launched on the stream has finished (a host wait:
  // runtime/host_wait.h).
  void synchronize() const;
  // A call that queues work and then waits for it (a blocking copy) makes the
  // capture check of synchronize() (runtime/capture.h) before it queues
  // anything, so a refusal leaves nothing queued on memory the caller owns
  // again once the call raised; then it waits with synchronizeSkippingCaptureCheck(),
  // which never refuses (work queued is waited for, whatever starts since).
  void checkCaptureAllowsHostWait(const char* what) const;
  void synchronizeSkippingCaptureCheck() const;
  // Shutdown once the runtime latched a failure on this stream (it stays so);
  // Success otherwise. Does not consume the failure synchronize()/query() report.
  SpyreStreamError getError() const;

  // Typed launch chokepoints: every piece of device work goes through one of
  // these. Host memory named here must stay valid until the work completes;
  // `keep_alive` runs (and is destroyed) in stream order after the operation.
  void launchH2D(const void* host, void* device, size_t nbytes,
                 std::function<void()> keep_alive = {}) const;
  void launchD2H(const void* device, void* host, size_t nbytes,
                 std::function<void()> keep_alive = {}) const;
  void launchD2D(const void* src, void* dst, size_t nbytes) const;
  void launchCompute(std::function<void()> fn, const char* name, size_t bytes = 0) const;
  // launchCompute for a stream of a device this op checked (the launch path
  // checks its device once per op), with the state `release` (if any) says
  // how to release. Whether an op is replayed is decided where it is recorded
  // (another thread may make the stream join a capture at any time).
  void launchCompute(CheckedDevice device, std::function<void()> fn, const char* name,
                     size_t bytes = 0, const ComputeRelease* release = nullptr) const;
  void launchHostCallback(std::function<void()> fn, const char* name) const;
  // A window in which the collective transport reads and writes device memory
  // (flex::PeerAccessWindow): it holds the stream from when the stream reaches
  // it until the transport closes it. Refused during a graph capture.
  void launchPeerAccessWindow(flex::PeerAccessWindow& window, const std::string& name) const;
  // Close `window` (queued on another stream) once this stream has run the
  // work queued on it before (flex::PeerAccessWindow::closeWhenReached).
  void launchPeerAccessClose(flex::PeerAccessWindow& window, const std::string& name) const;
  void launchFill(void* device, size_t nbytes, double value, flex::DataFormats format) const;
  void launchDelay(double milliseconds) const;

  [[noreturn]] static void throwNotSpyreStream(c10::Stream stream);

  bool operator==(const SpyreStream& other) const { return stream_ == other.stream_; }
  bool operator!=(const SpyreStream& other) const { return !(*this == other); }

 private:
  c10::Stream stream_;
};

std::ostream& operator<<(std::ostream& os, const SpyreStream& stream);

// Hand out a pool stream (round robin). priority >= 0 -> low-priority pool,
// < 0 -> high-priority pool (CUDA's order: getStreamFromPool(-1) asks for high
// priority). device -1 = the current device.
SpyreStream getStreamFromPool(int priority = 0, c10::DeviceIndex device = -1);
// The default stream (id 0).
SpyreStream getDefaultStream(c10::DeviceIndex device = -1);
// The next host-compute stream (ids 65..65+N-1, round robin).
SpyreStream getHostComputeStream(c10::DeviceIndex device = -1);
// The host-compute stream `id`; raises unless 65 <= id < 65+N.
SpyreStream getHostComputeStreamById(c10::StreamId id, c10::DeviceIndex device = -1);
// N: TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS (default 4; raises naming the value
// unless it is an integer from 1 to 8). Fixed when the runtime starts; until
// then read from the environment at each call, so a start that failed on a
// bad value can be retried after correcting it.
int hostComputeStreamCount();
// Raises like hostComputeStreamCount() for a bad value (startRuntime() checks
// it before creating the runtime's context).
void checkHostComputeSetting();
// The calling thread's current stream (the default stream until set).
// Inline (below): every op asks for it.
SpyreStream getCurrentStream(c10::DeviceIndex device = -1);
SpyreStream getCurrentStream(CheckedDevice device);
// Make `stream` the calling thread's current stream; returns the previous one.
// Raises for an id the pool never mapped.
SpyreStream setCurrentStream(SpyreStream stream);
// Block until every stream of the device has finished its work.
void synchronizeDeviceOrThrow(c10::DeviceIndex device = -1);
// Block until every stream of the device is idle without raising: what a
// profiler stopping needs. A stream that failed earlier runs nothing more and
// is skipped, its failure left for the next synchronize()/query(). A stream
// that fails during the drain reports its failure here: the first such
// message goes to `consumed`. Returns true if a stream of the device has failed.
bool synchronizeDeviceNoThrow(c10::DeviceIndex device, std::string& consumed);
// Block until every stream of the bound device is idle, consuming no failure:
// each stream is waited for through an event recorded on it, so a failure
// stays pending for the stream's own synchronize()/query() (a profiler hook
// must not take the error that belongs to the program's next synchronize).
// Never throws; does nothing when the runtime is not running.
void synchronizeDeviceKeepingFailures() noexcept;

// Called by startRuntime() before it publishes `context`: maps id 0 and the
// host-compute streams and fills the id lists. A failure leaves the pool
// untouched (streams already created stay with flex, unused).
void initializeStreamPool(c10::DeviceIndex device, flex::RuntimeContext* context);
// Number of ids with a flex handle (for tests).
size_t mappedStreamCount();
// Every mapped id with the id of its flex stream (flex::RuntimeStream::streamId()):
// the profiler sees flex ids and names its lanes after pool ids.
std::vector<std::pair<c10::StreamId, uint64_t>> mappedRuntimeStreamIds();

// ---- Inline hot paths. Their state lives in stream.cpp; constinit
// thread_locals are read without a TLS wrapper call.
namespace detail {
// The calling thread's current stream id.
extern thread_local constinit c10::StreamId tls_current_stream_id;
// The per-thread read-through handle cache (see "Handle cache" above): a null
// slot means "not resolved on this thread yet".
extern thread_local constinit std::array<flex::RuntimeStream*, kMaxStreamIds> tls_handle_cache;
// resolveRuntimeHandle()'s first resolution of an id on this thread: the
// shared_lock lookup (raises for an unmapped id), then the cache fill.
flex::RuntimeStream* lookUpAndCache(c10::StreamId id, c10::DeviceIndex device);
// A spyre c10::Stream for an index ensureDevice() accepted. c10::Device's
// validation is debug-only, so in a release build this is two stores.
inline c10::Stream makeSpyreStream(c10::DeviceIndex device, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, device), id);
}
}  // namespace detail

inline flex::RuntimeStream* SpyreStream::resolveRuntimeHandle() const {
  // First: raises in a forked child or for another device.
  return resolveRuntimeHandle(checkDevice(device_index()));
}

inline flex::RuntimeStream* SpyreStream::resolveRuntimeHandle(CheckedDevice /*device*/) const {
  const c10::StreamId stream_id = id();
  if (C10_LIKELY(stream_id >= 0 && stream_id < kMaxStreamIds)) {
    if (flex::RuntimeStream* cached = detail::tls_handle_cache[static_cast<size_t>(stream_id)]) {
      return cached;
    }
  }
  return detail::lookUpAndCache(stream_id, device_index());
}

inline SpyreStream getCurrentStream(c10::DeviceIndex device) {
  return SpyreStream(detail::makeSpyreStream(ensureDevice(device), detail::tls_current_stream_id));
}

// getCurrentStream for a device this op checked (the launch path checks its
// device once per op).
inline SpyreStream getCurrentStream(CheckedDevice device) {
  return SpyreStream(detail::makeSpyreStream(device.index(), detail::tls_current_stream_id));
}

#ifdef SPYRE_LOCK_AUDIT
namespace detail {
// Audit builds only (test/stress): which pool lock the calling thread holds,
// so wrappers around runtime calls can assert none is held while they run.
enum class PoolLockHeld { None, Shared, Unique };
PoolLockHeld poolLockHeldByThisThread();
}  // namespace detail
#endif

}  // namespace spyre
