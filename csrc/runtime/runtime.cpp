#include "runtime/runtime.h"

#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>

#include <c10/util/CallOnce.h>
#include <c10/util/Exception.h>

#include "runtime/host_wait.h"
#include "runtime/stream.h"

namespace spyre {

namespace {

constexpr const char* kShutdownMessage =
    "The Spyre runtime was shut down by free_runtime(); restarting it in the same "
    "process is not supported (start a new process)";
constexpr const char* kForkMessage =
    "Cannot re-initialize Spyre in forked subprocess. To use Spyre with "
    "multiprocessing, you must use the 'spawn' start method";

std::atomic<flex::RuntimeContext*>& runtimeSlot() {
  static std::atomic<flex::RuntimeContext*> context{nullptr};
  return context;
}

std::atomic<bool> runtime_freed{false};
std::atomic<void (*)()> runtime_started_callback{nullptr};

// LOCAL_RANK (set by torchrun) or 0; read once. A malformed value is reported
// on every use rather than silently replaced.
c10::DeviceIndex defaultDeviceIndex() {
  static const std::pair<int, std::string> parsed = []() -> std::pair<int, std::string> {
    const char* env = std::getenv("LOCAL_RANK");
    if (env == nullptr || *env == '\0') {
      return {0, ""};
    }
    char* end = nullptr;
    long value = std::strtol(env, &end, 10);
    if (*end != '\0' || value < 0 || value >= kMaxDevices) {
      return {-1, std::string("LOCAL_RANK='") + env +
                      "' is not a valid device index (expected an integer in [0, " +
                      std::to_string(kMaxDevices - 1) + "])"};
    }
    return {static_cast<int>(value), ""};
  }();
  TORCH_CHECK(parsed.second.empty(), parsed.second);
  return static_cast<c10::DeviceIndex>(parsed.first);
}


void markForkedChild() {
  // The child has the parent's memory but none of the runtime's threads.
  if (detail::bound_device.load() != detail::kUnbound) {
    detail::bound_device.store(detail::kForked);
  }
}

// Every check that can fail runs before anything is published: the context
// is set, the device bound and torch told only once the stream pool exists.
// flex keeps a context it created for the process's lifetime and returns it
// again to a retry for the same device, so a retry after a failure past
// create() reuses it.
void startRuntimeOnce() {
  const c10::DeviceIndex logical_device_id = currentDevice();
  checkVisibleDevice(logical_device_id);
  checkHostComputeSetting();  // configuration errors: before the context exists
  flex::RuntimeContext* context = flex::RuntimeContext::create(logical_device_id);
  TORCH_CHECK(context != nullptr, "Failed to initialize Spyre runtime for device ",
              static_cast<int>(logical_device_id));
  initializeStreamPool(logical_device_id, context);
  GlobalRuntime::set(context);
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] {
    pthread_atfork(nullptr, nullptr, markForkedChild);
    // Registered after the flex stub's shutdown guard was constructed: it
    // runs before that guard wakes the blocked waiters (host_wait.h).
    std::atexit(detail::markProcessExiting);
  });
  detail::bound_device.store(logical_device_id, std::memory_order_release);
  if (auto callback = runtime_started_callback.load()) {
    callback();
  }
}

}  // namespace

namespace detail {
std::atomic<int> bound_device{kUnbound};

void throwDeviceNotUsable(c10::DeviceIndex requested) {
  const int bound = bound_device.load();
  TORCH_CHECK(bound != kForked, kForkMessage);
  // An index past the visible devices is out of range, not "another device".
  checkVisibleDevice(requested);
  TORCH_CHECK(
      false, "Only one Spyre device per process is supported: this process is bound to spyre:",
      bound, " but spyre:", static_cast<int>(requested),
      " was requested (run one process per device, e.g. with torchrun)");
}

void ensureDeviceSlow(c10::DeviceIndex requested) {
  if (bound_device.load(std::memory_order_acquire) == kUnbound) {
    startRuntime();
  }
  if (bound_device.load(std::memory_order_acquire) != requested) {
    throwDeviceNotUsable(requested);
  }
}
}  // namespace detail

flex::RuntimeContext* GlobalRuntime::get() {
  return runtimeSlot().load(std::memory_order_acquire);
}

void GlobalRuntime::set(flex::RuntimeContext* context) {
  runtimeSlot().store(context, std::memory_order_release);
}

void GlobalRuntime::reset() {
  runtimeSlot().store(nullptr, std::memory_order_release);
}

c10::DeviceIndex deviceCount() {
  int count = 0;
  try {
    count = flex::getNumDevices();
  } catch (const flex::Error& e) {
    TORCH_CHECK(false, e.what());
  }
  TORCH_CHECK(count <= kMaxDevices, count, " Spyre devices are visible, but at most ", kMaxDevices,
              " are supported (device indices are int8); set SPYRE_DEVICES or AIU_WORLD_SIZE "
              "to fewer devices");
  return static_cast<c10::DeviceIndex>(count);
}

c10::DeviceIndex deviceCountNoThrow() noexcept {
  try {
    return deviceCount();
  } catch (...) {
    return 0;
  }
}

namespace detail {
thread_local constinit c10::DeviceIndex tls_current_device = -1;

c10::DeviceIndex initCurrentDevice() {
  tls_current_device = defaultDeviceIndex();
  return tls_current_device;
}
}  // namespace detail

void throwInvalidDeviceIndex(const std::string& index) {
  const c10::DeviceIndex count = deviceCount();
  TORCH_CHECK(false, "Invalid device index ", index, ": out of range for ",
              static_cast<int>(count), " visible Spyre device(s) (expected an index in [0, ",
              static_cast<int>(count), "))");
}

void checkVisibleDevice(int64_t index) {
  if (C10_UNLIKELY(index < 0 || index >= deviceCount())) {
    throwInvalidDeviceIndex(std::to_string(index));
  }
}

void setCurrentDevice(c10::DeviceIndex index) {
  checkVisibleDevice(index);
  detail::tls_current_device = index;
}

void setCurrentDeviceUnchecked(c10::DeviceIndex index) noexcept {
  detail::tls_current_device = index;
}

void startRuntime() {
  static c10::once_flag started;
  TORCH_CHECK(!runtime_freed.load(), kShutdownMessage);
  TORCH_CHECK(detail::bound_device.load() != detail::kForked, kForkMessage);
  // c10::call_once rather than std::call_once: libstdc++'s can hang when the
  // callable threw and a later call retries (GCC bug 66146); a failed start
  // must be retryable.
  c10::call_once(started, startRuntimeOnce);
}

void freeRuntime() {
  runtime_freed.store(true);
  GlobalRuntime::reset();
}

void setRuntimeStartedCallback(void (*callback)()) {
  runtime_started_callback.store(callback);
}

bool isRuntimeStarted() {
  return detail::bound_device.load() >= 0 && !runtime_freed.load();
}

bool isInBadFork() {
  return detail::bound_device.load() == detail::kForked;
}

void checkNotInBadFork() {
  TORCH_CHECK(!isInBadFork(), kForkMessage);
}

flex::RuntimeContext* runtimeContext() {
  flex::RuntimeContext* context = GlobalRuntime::get();
  if (C10_LIKELY(context != nullptr)) {
    return context;
  }
  TORCH_CHECK(!runtime_freed.load(), kShutdownMessage);
  TORCH_CHECK(detail::bound_device.load() != detail::kForked, kForkMessage);
  startRuntime();
  return GlobalRuntime::get();
}

c10::DeviceIndex boundDevice() {
  if (C10_UNLIKELY(detail::bound_device.load(std::memory_order_acquire) < 0)) {
    TORCH_CHECK(detail::bound_device.load() != detail::kForked, kForkMessage);
    startRuntime();
  }
  return static_cast<c10::DeviceIndex>(detail::bound_device.load(std::memory_order_acquire));
}

}  // namespace spyre
