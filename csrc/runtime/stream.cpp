#include "runtime/stream.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/util/CallOnce.h>
#include <c10/util/Exception.h>
#include <flex/card.hpp>

#include "runtime/capture.h"
#include "runtime/card_priced_launch.h"
#include "runtime/error.h"
#include "runtime/host_wait.h"
#include "runtime/runtime.h"
#include "runtime/sanitizer.h"

namespace spyre {

namespace {

struct StreamPool {
  mutable std::shared_mutex mutex;
  // Non-owning: every pointer is borrowed from the flex runtime. Append-only.
  std::unordered_map<c10::StreamId, flex::RuntimeStream*> stream_handle_map;
  std::vector<c10::StreamId> low_priority_streams;
  std::vector<c10::StreamId> high_priority_streams;
  std::vector<c10::StreamId> host_compute_streams;  // all mapped at initialization
  size_t next_low_priority_idx = 0;
  size_t next_high_priority_idx = 0;
  size_t next_host_compute_idx = 0;
  // Touched only under `mutex` (upstream indexed its once-flag map unlocked).
  std::unordered_map<c10::DeviceIndex, bool> device_init_flags;
  // One flag per pool id: its flex stream is created once, outside `mutex`.
  std::array<c10::once_flag, kNumPoolStreamIds> creation_flags;
};

// Leaked on purpose: handles may be resolved from static destructors.
StreamPool& streamPool() {
  static StreamPool* pool = new StreamPool();
  return *pool;
}

#ifdef SPYRE_LOCK_AUDIT
thread_local detail::PoolLockHeld tls_pool_lock_held = detail::PoolLockHeld::None;
#endif

// The pool mutex, held as Lock (std::shared_lock or std::unique_lock). Audit
// builds also record which lock the thread holds, so a test can assert that
// no runtime call is made under it.
template <template <class> class Lock>
class PoolLock {
 public:
  explicit PoolLock(StreamPool& pool) : lock_(pool.mutex) {
#ifdef SPYRE_LOCK_AUDIT
    tls_pool_lock_held = std::is_same_v<Lock<std::shared_mutex>, std::unique_lock<std::shared_mutex>>
                             ? detail::PoolLockHeld::Unique
                             : detail::PoolLockHeld::Shared;
#endif
  }
  ~PoolLock() {
#ifdef SPYRE_LOCK_AUDIT
    tls_pool_lock_held = detail::PoolLockHeld::None;
#endif
  }
  PoolLock(const PoolLock&) = delete;
  PoolLock& operator=(const PoolLock&) = delete;

 private:
  Lock<std::shared_mutex> lock_;
};

// TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS, parsed once; a bad value is reported
// on every use rather than replaced.
struct HostComputeSetting {
  int count = kDefaultHostComputeStreams;
  std::string error;
};

HostComputeSetting parseHostComputeSetting() {
  const char* env = std::getenv("TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS");
  if (env == nullptr || *env == '\0') {
    return {};
  }
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  if (*end != '\0' || end == env || value < 1 || value > kMaxHostComputeStreams) {
    return {0, std::string("TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS='") + env +
                   "' is not a valid number of host-compute streams (expected an integer from 1 "
                   "to " + std::to_string(kMaxHostComputeStreams) + "; unset, the default is " +
                   std::to_string(kDefaultHostComputeStreams) + ")"};
  }
  return {static_cast<int>(value), ""};
}

// The count the pool was initialized with (0 before): fixed from then on.
std::atomic<int> pool_host_compute_count{0};

void initializeStreamPoolImpl(c10::DeviceIndex device, flex::RuntimeContext* context) {
  StreamPool& pool = streamPool();
  const int host_compute_count = hostComputeStreamCount();  // raises on a bad value
  TORCH_CHECK(context != nullptr, "initializeStreamPoolImpl: the Spyre runtime is not started");
  // Asked before locking: no runtime call runs under the pool lock (the audit
  // build of test/stress checks it). The host-compute streams are created
  // here, then mapped under the unique_lock with the default stream. Called
  // once per process (startRuntime), so none is created twice.
  flex::RuntimeStream* default_stream = context->getDefaultStream();
  std::vector<flex::RuntimeStream*> host_compute_handles;
  for (int i = 0; i < host_compute_count; ++i) {
    host_compute_handles.push_back(context->createStream(flex::RuntimeStreamPriority::NORMAL,
                                                         flex::RuntimeStreamMode::STRICT_ORDERING,
                                                         /*track_hazards=*/false));
  }
  PoolLock<std::unique_lock> lock(pool);
  if (pool.device_init_flags[device]) {
    return;
  }
  TORCH_CHECK(pool.device_init_flags.size() == 1,
              "initializeStreamPoolImpl: the stream pool already serves another device; "
              "cannot initialize it for spyre:", static_cast<int>(device),
              " (one Spyre device per process)");
  pool.stream_handle_map.emplace(kDefaultStreamId, default_stream);
  for (int i = 0; i < kStreamsPerPool; ++i) {
    pool.low_priority_streams.push_back(kFirstLowPriorityStreamId + i);
    pool.high_priority_streams.push_back(kFirstHighPriorityStreamId + i);
  }
  for (int i = 0; i < host_compute_count; ++i) {
    pool.host_compute_streams.push_back(kFirstHostComputeStreamId + i);
    pool.stream_handle_map.emplace(kFirstHostComputeStreamId + i, host_compute_handles[i]);
  }
  pool.next_low_priority_idx = 0;
  pool.next_high_priority_idx = 0;
  pool.next_host_compute_idx = 0;
  pool.device_init_flags[device] = true;
  pool_host_compute_count.store(host_compute_count, std::memory_order_release);
}

// Create the flex stream behind a pool id on its first hand-out. The creation
// runs outside the pool lock (readers never wait for it); the insert takes the
// write lock only for the map update.
void createRuntimeStream(c10::StreamId id, bool high_priority) {
  StreamPool& pool = streamPool();
  c10::call_once(pool.creation_flags[id], [&] {
    flex::RuntimeStream* handle = runtimeContext()->createStream(
        high_priority ? flex::RuntimeStreamPriority::HIGH : flex::RuntimeStreamPriority::NORMAL,
        flex::RuntimeStreamMode::STRICT_ORDERING, /*track_hazards=*/false);
    PoolLock<std::unique_lock> lock(pool);
    pool.stream_handle_map.emplace(id, handle);
  });
}

}  // namespace

namespace detail {
thread_local constinit c10::StreamId tls_current_stream_id = kDefaultStreamId;

// Per-thread read-through cache of resolved handles, indexed by stream id
// (docs/streams.md, "The per-thread handle cache"). A slot is filled from
// stream_handle_map under the shared_lock the first time this thread resolves
// the id, and read without any lock afterwards. Valid by the note's
// invariants: the map is append-only, an id once mapped always maps to the
// same flex::RuntimeStream*, and no handle is ever removed or destroyed by the
// pool, so a cached slot can never go stale. Only found handles are cached: an
// unmapped id takes the locked lookup (and raises) every time, and is
// resolved normally once the pool maps it. Plain pointers: no destructor
// runs at thread exit.
thread_local constinit std::array<flex::RuntimeStream*, kMaxStreamIds> tls_handle_cache{};

// resolveRuntimeHandle()'s first resolution of `id` on this thread: the
// note's shared_lock lookup, then the handle goes into the thread's cache.
flex::RuntimeStream* lookUpAndCache(c10::StreamId id, c10::DeviceIndex device) {
  StreamPool& pool = streamPool();
  flex::RuntimeStream* handle = nullptr;
  {
    PoolLock<std::shared_lock> lock(pool);
    auto it = pool.stream_handle_map.find(id);
    TORCH_CHECK(it != pool.stream_handle_map.end(), "SpyreStream: no flex handle for stream id ",
                id, " on spyre:", static_cast<int>(device),
                " (ids 0-64 are valid and mapped when first handed out by the pool, ",
                kFirstHostComputeStreamId, "-", kFirstHostComputeStreamId + hostComputeStreamCount() - 1,
                " are the host-compute streams; create streams with torch.spyre.Stream() or "
                "torch.Stream(device='spyre'))");
    handle = it->second;
  }
  if (id >= 0 && id < kMaxStreamIds) {
    tls_handle_cache[static_cast<size_t>(id)] = handle;
  }
  return handle;
}

}  // namespace detail

#ifdef SPYRE_LOCK_AUDIT
detail::PoolLockHeld detail::poolLockHeldByThisThread() {
  return tls_pool_lock_held;
}
#endif

int hostComputeStreamCount() {
  if (const int fixed = pool_host_compute_count.load(std::memory_order_acquire)) return fixed;
  const HostComputeSetting setting = parseHostComputeSetting();
  TORCH_CHECK(setting.error.empty(), setting.error);
  return setting.count;
}

void checkHostComputeSetting() {
  hostComputeStreamCount();
}

void initializeStreamPool(c10::DeviceIndex device, flex::RuntimeContext* context) {
  initializeStreamPoolImpl(device, context);
}

size_t mappedStreamCount() {
  checkNotInBadFork();  // a parent thread may have held the pool lock at fork()
  StreamPool& pool = streamPool();
  PoolLock<std::shared_lock> lock(pool);
  return pool.stream_handle_map.size();
}

std::vector<std::pair<c10::StreamId, uint64_t>> mappedRuntimeStreamIds() {
  checkNotInBadFork();
  StreamPool& pool = streamPool();
  std::vector<std::pair<c10::StreamId, uint64_t>> ids;
  PoolLock<std::shared_lock> lock(pool);
  for (const auto& [id, handle] : pool.stream_handle_map) ids.emplace_back(id, handle->streamId());
  return ids;
}

void SpyreStream::throwNotSpyreStream(c10::Stream stream) {
  TORCH_CHECK(false, "SpyreStream requires a spyre (PrivateUse1) stream, got a stream of device type ",
              stream.device_type());
}

int SpyreStream::priority() const {
  return id() >= kFirstHighPriorityStreamId && id() < kNumPoolStreamIds ? kHighPriority : kLowPriority;
}

bool SpyreStream::query() const {
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    const c10::StreamId stream_id = id();
    capture::checkCaptureAllowsHostWait(&stream_id, "query()");
  }
  const bool done = handle->query();
  if (done) sanitizer::onStreamComplete(id());  // the host now knows
  return done;
}

void SpyreStream::synchronize() const {
  checkCaptureAllowsHostWait("synchronize()");
  synchronizeSkippingCaptureCheck();
}

void SpyreStream::checkCaptureAllowsHostWait(const char* what) const {
  if (C10_UNLIKELY(capture::anyCapture())) {
    const c10::StreamId stream_id = id();
    capture::checkCaptureAllowsHostWait(&stream_id, what);
  }
}

void SpyreStream::synchronizeSkippingCaptureCheck() const {
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  // A stream found idle has nothing to wait for: no host wait, so no GIL
  // release either. Not under the card clock, whose host time a wait moves
  // to the end of the stream's work even when that work is done.
  static const bool card_timing = flex::card::enabled();
  if (!card_timing && handle->query()) {  // raises the stream's failure, as synchronize() does
    sanitizer::onStreamComplete(id());
    return;
  }
  waitForDevice([handle] { handle->synchronize(); });
  sanitizer::onStreamComplete(id());
}

SpyreStreamError SpyreStream::getError() const {
  return resolveRuntimeHandle()->needsShutdown() ? SpyreStreamError::Shutdown
                                                 : SpyreStreamError::Success;
}

void SpyreStream::launchH2D(const void* host, void* device, size_t nbytes,
                            std::function<void()> keep_alive) const {
  flex::CompositeAddress address(device, nbytes);
  flex::DmaParams params(const_cast<void*>(host), nbytes, /*to_dev=*/true, &address);
  params.callback = std::move(keep_alive);
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), "a copy from host memory (H2D)");
  }
  handle->launchOperationH2D(&params);
}

void SpyreStream::launchD2H(const void* device, void* host, size_t nbytes,
                            std::function<void()> keep_alive) const {
  flex::CompositeAddress address(const_cast<void*>(device), nbytes);
  flex::DmaParams params(host, nbytes, /*to_dev=*/false, &address);
  params.callback = std::move(keep_alive);
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), "a copy to host memory (D2H)");
  }
  handle->launchOperationD2H(&params);
}

void SpyreStream::launchD2D(const void* src, void* dst, size_t nbytes) const {
  flex::D2DParams params;
  params.src = flex::CompositeAddress(const_cast<void*>(src), nbytes);
  params.dst = flex::CompositeAddress(dst, nbytes);
  params.size = nbytes;
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture()) && capture::recordD2D(id(), params)) return;
  handle->launchOperationD2D(&params);
}

namespace {
flex::ComputeParams computeParams(std::function<void()> fn, const char* name, size_t bytes) {
  flex::ComputeParams params;
  params.fn = std::move(fn);
  params.name = name != nullptr ? name : "compute";
  params.bytes = bytes;
  return params;
}
}  // namespace

// The closure is built for this one launch: the runtime takes it (moved).
void SpyreStream::launchCompute(std::function<void()> fn, const char* name, size_t bytes) const {
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture()) && capture::recordCompute(id(), fn, name, bytes)) return;
  handle->launchOperationCompute(computeParams(std::move(fn), name, bytes));
}

void SpyreStream::launchCompute(CheckedDevice device, std::function<void()> fn, const char* name,
                                size_t bytes, const ComputeRelease* release) const {
  flex::RuntimeStream* handle = resolveRuntimeHandle(device);
  if (C10_UNLIKELY(capture::anyCapture()) &&
      capture::recordCompute(id(), fn, name, bytes, release ? &release->record_as : nullptr)) {
    return;
  }
  flex::ComputeParams params = computeParams(std::move(fn), name, bytes);
  if (release != nullptr) {
    params.on_discard = release->on_discard;
    params.discard_arg = release->arg;
  }
  handle->launchOperationCompute(std::move(params));
}

void launchComputeWithCost(const SpyreStream& stream, CheckedDevice device,
                           std::function<void()> fn, const char* name, size_t bytes,
                           const flex::WorkCost& cost, const ComputeRelease* release) {
  flex::RuntimeStream* handle = stream.resolveRuntimeHandle(device);
  if (C10_UNLIKELY(capture::anyCapture()) &&
      capture::recordCompute(stream.id(), fn, name, bytes,
                             release ? &release->record_as : nullptr)) {
    return;
  }
  flex::ComputeParams params = computeParams(std::move(fn), name, bytes);
  params.cost = cost;
  if (release != nullptr) {
    params.on_discard = release->on_discard;
    params.discard_arg = release->arg;
  }
  handle->launchOperationCompute(std::move(params));
}

void SpyreStream::launchHostCallback(std::function<void()> fn, const char* name) const {
  flex::HostCallbackParams params;
  params.fn = std::move(fn);
  params.name = name != nullptr ? name : "host_callback";
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), std::string("a host callback (") + params.name + ")");
  }
  handle->launchOperationHostCallback(&params);
}

void SpyreStream::launchPeerAccessWindow(flex::PeerAccessWindow& window,
                                         const std::string& name) const {
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), "a collective's peer access window (" + name + ")");
  }
  window.enqueueOn(handle, name);
}

void SpyreStream::launchPeerAccessClose(flex::PeerAccessWindow& window,
                                        const std::string& name) const {
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), "the close of a collective's hold (" + name + ")");
  }
  window.closeWhenReached(handle);
}

void SpyreStream::launchFill(void* device, size_t nbytes, double value,
                             flex::DataFormats format) const {
  flex::CompositeAddress address(device, nbytes);
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture()) && capture::recordFill(id(), address, value, format)) {
    return;
  }
  handle->fillAsync(&address, value, format);
}

void SpyreStream::launchDelay(double milliseconds) const {
  TORCH_CHECK(std::isfinite(milliseconds) && milliseconds >= 0 &&
                  milliseconds <= kMaxDelayMilliseconds,
              "delay must be a finite, non-negative number of milliseconds, at most ",
              kMaxDelayMilliseconds, ", got ", milliseconds);
  flex::RuntimeStream* handle = resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(id(), "a delay (torch.spyre._sleep)");
  }
  handle->launchOperationDelay(
      std::chrono::nanoseconds(std::llround(milliseconds * 1e6)));
}

std::ostream& operator<<(std::ostream& os, const SpyreStream& stream) {
  return os << "SpyreStream(device=spyre:" << static_cast<int>(stream.device_index())
            << ", id=" << stream.id() << ")";
}

SpyreStream getStreamFromPool(int priority, c10::DeviceIndex device) {
  device = ensureDevice(device);
  StreamPool& pool = streamPool();
  const bool high_priority = priority < 0;
  c10::StreamId id = 0;
  {
    PoolLock<std::unique_lock> lock(pool);
    auto& ids = high_priority ? pool.high_priority_streams : pool.low_priority_streams;
    auto& next = high_priority ? pool.next_high_priority_idx : pool.next_low_priority_idx;
    id = ids[next];
    next = (next + 1) % ids.size();
  }
  // On an id miss, creates the flex stream and inserts it (once per id); once
  // it exists, only the once-flag's acquire load: the map is not searched.
  createRuntimeStream(id, high_priority);
  return SpyreStream(detail::makeSpyreStream(device, id));
}

SpyreStream getHostComputeStream(c10::DeviceIndex device) {
  device = ensureDevice(device);
  StreamPool& pool = streamPool();
  c10::StreamId id = 0;
  {
    PoolLock<std::unique_lock> lock(pool);
    id = pool.host_compute_streams[pool.next_host_compute_idx];
    pool.next_host_compute_idx = (pool.next_host_compute_idx + 1) % pool.host_compute_streams.size();
  }
  return SpyreStream(detail::makeSpyreStream(device, id));
}

SpyreStream getHostComputeStreamById(c10::StreamId id, c10::DeviceIndex device) {
  device = ensureDevice(device);
  // The ids are fixed when the pool is initialized (at runtime start): no lock.
  const int count = hostComputeStreamCount();
  TORCH_CHECK(id >= kFirstHostComputeStreamId && id < kFirstHostComputeStreamId + count,
              "host_compute_stream_by_id: stream id ", id,
              " is not a host-compute stream id (expected an id from ", kFirstHostComputeStreamId,
              " to ", kFirstHostComputeStreamId + count - 1, ": ", count,
              " host-compute streams, TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS)");
  return SpyreStream(detail::makeSpyreStream(device, id));
}

SpyreStream getDefaultStream(c10::DeviceIndex device) {
  return SpyreStream(detail::makeSpyreStream(ensureDevice(device), kDefaultStreamId));
}

SpyreStream setCurrentStream(SpyreStream stream) {
  stream.resolveRuntimeHandle();  // reject unmapped ids and other devices now
  SpyreStream previous(
      detail::makeSpyreStream(stream.device_index(), detail::tls_current_stream_id));
  detail::tls_current_stream_id = stream.id();
  return previous;
}

namespace {

// Every mapped handle (pool and host-compute ids), copied under the read lock
// so the waits that follow hold no lock.
struct MappedHandles : std::array<flex::RuntimeStream*, kMaxStreamIds> {
  size_t collect(StreamPool& pool) {
    PoolLock<std::shared_lock> lock(pool);
    size_t count = 0;
    for (const auto& entry : pool.stream_handle_map) (*this)[count++] = entry.second;
    return count;
  }
};

}  // namespace

void synchronizeDeviceOrThrow(c10::DeviceIndex device) {
  ensureDevice(device);
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::checkCaptureAllowsHostWait(nullptr, "synchronize() of the device");
  }
  MappedHandles handles;
  const size_t count = handles.collect(streamPool());
  // Blocking work happens after the read lock is released. Every stream is
  // drained even if one reports an error; the first error is rethrown.
  waitForDevice([&] {
    std::exception_ptr first_error;
    for (size_t i = 0; i < count; ++i) {
      try {
        handles[i]->synchronize();
      } catch (...) {
        if (!first_error) {
          first_error = std::current_exception();
        }
      }
    }
    if (first_error) {
      std::rethrow_exception(first_error);
    }
  });
  sanitizer::onDeviceComplete();
}

bool synchronizeDeviceNoThrow(c10::DeviceIndex device, std::string& consumed) {
  ensureDevice(device);
  MappedHandles handles;
  const size_t count = handles.collect(streamPool());
  // Launches nothing: a profile still recording would show the drain's work.
  waitForDevice([&] {
    for (size_t i = 0; i < count; ++i) {
      if (handles[i]->needsShutdown()) continue;  // its queue was dropped when it failed
      try {
        handles[i]->synchronize();
      } catch (const flex::Error& e) {
        if (consumed.empty()) consumed = e.what();
      }
    }
  });
  sanitizer::onDeviceComplete();
  bool failed = false;
  for (size_t i = 0; i < count; ++i) failed = failed || handles[i]->needsShutdown();
  return failed;
}

void synchronizeDeviceKeepingFailures() noexcept {
  if (!isRuntimeStarted()) return;
  try {
    MappedHandles handles;
    const size_t count = handles.collect(streamPool());
    waitForDevice([&] {
      for (size_t i = 0; i < count; ++i) {
        if (handles[i]->needsShutdown()) continue;  // failed: runs nothing more
        try {
          flex::RuntimeEvent done;
          done.record(handles[i]);
          done.synchronize();
        } catch (...) {
          // the stream failed meanwhile: its failure stays pending on it
        }
      }
    });
    sanitizer::onDeviceComplete();
  } catch (...) {
  }
}

}  // namespace spyre
