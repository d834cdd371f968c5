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

// Visible Spyre devices (flex::getNumDevices()). Throws on a malformed
// SPYRE_DEVICES / AIU_WORLD_SIZE / LOCAL_WORLD_SIZE / FLEX_STUB_CARDS.
c10::DeviceIndex deviceCount();
// Same, but 0 instead of throwing (for noexcept callers).
c10::DeviceIndex deviceCountNoThrow() noexcept;

// The calling thread's current device. Defaults to LOCAL_RANK (else 0).
c10::DeviceIndex currentDevice();
// Sets the calling thread's current device after checking it against the
// visible device count ("... out of range ...").
void setCurrentDevice(c10::DeviceIndex index);
// Sets it without any check (for noexcept guard restores).
void setCurrentDeviceUnchecked(c10::DeviceIndex index) noexcept;

// Start the runtime once per process. Retried if it failed; raises if the
// runtime was freed or the process is a fork of one that had started it.
void startRuntime();
// GlobalRuntime::reset(); see the header comment for what remains usable.
void freeRuntime();
bool isRuntimeStarted();
bool isInBadFork();
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
// `index` is the device this process is bound to. Returns the resolved index.
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

// The device this process is bound to, starting the runtime if needed.
c10::DeviceIndex boundDevice();

// Process exit. A thread blocked in a runtime wait (stream, device or event
// synchronize; the allocator's wait for pending frees) can be woken while the
// process is exiting: by the flex
// runtime's shutdown at exit(), or during interpreter finalization when a
// finalized object releases what it waited for. Such a thread must not return
// to its caller: a Python daemon thread would re-take the GIL of a finalizing
// interpreter, and CPython ends it with pthread_exit from inside a noexcept
// destructor, which aborts the whole process ("terminate called without an
// active exception"). parkIfExiting(), called after every blocking runtime
// wait, parks such a thread until the process is gone. It parks when
//   - exit() is running on another thread (flag set by an atexit handler
//     registered when the runtime starts, so it runs before the runtime's own
//     shutdown wakes the waiters), or
//   - the check installed by setExitParkCheck() says so (the Python bindings:
//     the interpreter is finalizing and this is a Python thread other than
//     the main thread).
// The thread running exit() or the finalization is never parked.
// docs/reliability.md, "Teardown order", has the whole sequence.
void parkIfExiting() noexcept;
void setExitParkCheck(bool (*check)() noexcept);

}  // namespace spyre
