// Host waits on device work: one helper for every blocking wait.
//
// waitForDevice(wait) runs `wait` (a stream, event or device synchronize, the
// allocator's wait for pending frees) so that
//  1. the waiting thread holds no interpreter lock while it waits: the wrapper
//     installed by the Python bindings releases the GIL if the thread holds it
//     (an engine thread finishing the awaited work may need a Python thread to
//     run; runtime/ itself never touches Python), and
//  2. a thread woken because the process is exiting never returns to its
//     caller: parkIfExiting() parks it (see below).
// Exceptions thrown by `wait` reach the caller after the park check.
//
// Process exit. A thread blocked in a runtime wait can be woken while the
// process is exiting: by the flex runtime's shutdown at exit(), or during
// interpreter finalization when a finalized object releases what it waited
// for. A Python daemon thread returning then would re-take the GIL of a
// finalizing interpreter, and CPython ends it with pthread_exit from inside a
// noexcept destructor, which aborts the process. parkIfExiting() parks such a
// thread until the process is gone. It parks when
//   - exit() is running on another thread (flag set by an atexit handler
//     registered when the runtime starts, so it runs before the runtime's own
//     shutdown wakes the waiters), or
//   - the check installed by setExitParkCheck() says so (the Python bindings:
//     the interpreter is finalizing and this is a Python thread other than
//     the main thread).
// The thread running exit() or the finalization is never parked.
// docs/reliability.md, "Teardown order", has the whole sequence.
#pragma once

#include <exception>
#include <utility>

namespace spyre {

void parkIfExiting() noexcept;
void setExitParkCheck(bool (*check)() noexcept);

// Runs fn(arg) the way a blocking host wait must run: through the wrapper
// installed with setHostWaitWrapper (the GIL released), or directly.
// `fn` must not throw.
using HostWaitFn = void (*)(void* arg) noexcept;
void runHostWait(HostWaitFn fn, void* arg) noexcept;
void setHostWaitWrapper(void (*wrapper)(HostWaitFn fn, void* arg) noexcept);
// How many threads are inside runHostWait now: blocked in a wait on device
// work, or about to be (an observable condition for tests; a diagnostic).
int threadsInHostWaits() noexcept;

template <class Wait>
void waitForDevice(Wait&& wait) {
  struct Call {
    Wait& wait;
    std::exception_ptr error;
  } call{wait, nullptr};
  runHostWait(
      [](void* arg) noexcept {
        auto* c = static_cast<Call*>(arg);
        try {
          c->wait();
        } catch (...) {
          c->error = std::current_exception();
        }
      },
      &call);
  parkIfExiting();  // woken because the process exits: do not return
  if (call.error) {
    std::rethrow_exception(call.error);
  }
}

namespace detail {
// The atexit handler registered when the runtime starts (see above).
void markProcessExiting();
}  // namespace detail

}  // namespace spyre
