// Runtime lifecycle: the process's flex::RuntimeContext, the device it is bound
// to, and every thread's current device.
//
// One process, one device. startRuntime() creates the flex context exactly once
// per process, for the logical device chosen from the calling thread's current
// device (which defaults to LOCAL_RANK, else 0, in every thread). Afterwards any
// use of another device index raises. freeRuntime() drops torch-spyre's pointer
// to the context; handles already mapped keep working (flex owns them), anything
// that needs the context raises, and the runtime cannot be started again.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>
#include <flex/flex.hpp>

namespace spyre {

// Non-owning holder of the process's flex::RuntimeContext* (a function-local
// static). torch-spyre never destroys the context: flex owns it.
struct GlobalRuntime {
  GlobalRuntime() = delete;
  static flex::RuntimeContext* get();
  static void set(flex::RuntimeContext* context);
  static void reset();
};

// Device indices are c10::DeviceIndex (int8_t): at most this many devices, with
// indices in [0, kMaxDevices). Every narrowing to c10::DeviceIndex is checked
// against it.
constexpr int kMaxDevices = 127;

// Visible Spyre devices (flex::getNumDevices()); more than kMaxDevices is an error. Throws on a malformed
// SPYRE_DEVICES / AIU_WORLD_SIZE / LOCAL_WORLD_SIZE / FLEX_STUB_CARDS.
c10::DeviceIndex deviceCount();
// Same, but 0 instead of throwing (for noexcept callers).
c10::DeviceIndex deviceCountNoThrow() noexcept;
// Raises "Invalid device index N: out of range for M visible Spyre device(s) ..."
// unless 0 <= index < deviceCount(). Does not start the runtime. The one
// message for an index that names no device, wherever it was parsed: callers
// check wide integers (int64, Python ints) with it before narrowing them to
// c10::DeviceIndex.
void checkVisibleDevice(int64_t index);
// The same error for an index written as text (one too wide for int64).
[[noreturn]] void throwInvalidDeviceIndex(const std::string& index);

namespace detail {
// The calling thread's current device: -1 until the thread first asks, then
// LOCAL_RANK (or 0) unless set. constinit: read without a TLS wrapper call.
extern thread_local constinit c10::DeviceIndex tls_current_device;
c10::DeviceIndex initCurrentDevice();
}  // namespace detail

// The calling thread's current device. Defaults to LOCAL_RANK (else 0).
// Inline: every stream and device call reads it.
inline c10::DeviceIndex currentDevice() {
  const c10::DeviceIndex index = detail::tls_current_device;
  if (C10_LIKELY(index >= 0)) {
    return index;
  }
  return detail::initCurrentDevice();
}
// Sets the calling thread's current device after checking it against the
// visible device count ("... out of range ...").
void setCurrentDevice(c10::DeviceIndex index);
// Sets it without any check (for noexcept guard restores).
void setCurrentDeviceUnchecked(c10::DeviceIndex index) noexcept;

// Start the runtime once per process; raises if the runtime was freed or the
// process is a fork of one that had started it. A start that fails leaves the
// process as if it had not started (docs/reliability.md, "A failed start"):
// nothing bound, GlobalRuntime null, the device state NotInitialized; the next
// use tries again and re-reads the configuration.
void startRuntime();
// GlobalRuntime::reset(); see the header comment for what remains usable.
void freeRuntime();
// True while the runtime runs: started, and not freed by freeRuntime().
bool isRuntimeStarted();
bool isInBadFork();
// Raises "Cannot re-initialize Spyre in forked subprocess ..." in such a child.
void checkNotInBadFork();
// Called (once, on the starting thread) after the runtime started. The Python
// bindings use it to tell torch the device is initialized; the core itself
// stays free of libtorch_python.
void setRuntimeStartedCallback(void (*callback)());

// The live context; raises when the runtime was freed (or never started).
flex::RuntimeContext* runtimeContext();

namespace detail {
constexpr int kUnbound = -1;
constexpr int kForked = -2;
// The bound device index, kUnbound before start, kForked in a forked child.
extern std::atomic<int> bound_device;
[[noreturn]] void throwDeviceNotUsable(c10::DeviceIndex requested);
void ensureDeviceSlow(c10::DeviceIndex requested);
}  // namespace detail

// Resolve -1 to the current device, start the runtime if needed and check that
// `index` is the device this process is bound to (an index that is not visible
// is out of range; a visible one that is not bound is the one-device-per-process
// error). Returns the resolved index.
// Hot path: one relaxed atomic load and a compare once started.
inline c10::DeviceIndex ensureDevice(c10::DeviceIndex index) {
  if (index < 0) {
    index = currentDevice();
  }
  if (C10_UNLIKELY(detail::bound_device.load(std::memory_order_acquire) != index)) {
    detail::ensureDeviceSlow(index);
  }
  return index;
}

// A device index ensureDevice() accepted during the current op. The launch
// path checks an op's device once; the calls that take a CheckedDevice (an
// allocation, the current stream, a compute launch) trust it instead of
// checking again at every step. Only checkDevice() makes one.
class CheckedDevice {
 public:
  c10::DeviceIndex index() const { return index_; }

 private:
  explicit CheckedDevice(c10::DeviceIndex index) : index_(index) {}
  friend CheckedDevice checkDevice(c10::DeviceIndex index);
  c10::DeviceIndex index_;
};

inline CheckedDevice checkDevice(c10::DeviceIndex index) {
  return CheckedDevice(ensureDevice(index));
}

// The device this process is bound to, starting the runtime if needed.
c10::DeviceIndex boundDevice();


}  // namespace spyre
