// Sync debug mode, as torch.cuda.set_sync_debug_mode: a process-wide setting
// that makes the host's implicit waits for the device warn or raise.
//
// Implicit waits are the ones the user did not ask for by name: .item(), a
// blocking copy between spyre and cpu, an op that runs at the call on the
// synchronous path (nonzero, masked_select, unique, ...). Only those sites
// call checkImplicitSync(); explicit waits (synchronize() of the device, a
// stream or an event) never do. The check runs before the wait and before
// anything is queued, so an error leaves the stream as it was.
//
// Off (the default) the check is one relaxed atomic load.
#pragma once

#include <atomic>

#include <c10/macros/Macros.h>

namespace spyre {

// Values as torch.cuda's: 0 default (silent), 1 warn, 2 error.
enum class SyncDebugMode : int { Default = 0, Warn = 1, Error = 2 };

// Raises (c10::ValueError) for a value other than 0, 1, 2.
void setSyncDebugMode(int mode);
int getSyncDebugMode() noexcept;

namespace detail {
extern std::atomic<int> sync_debug_mode;
// Warns (TORCH_WARN) or raises (RuntimeError) per the mode.
void reportImplicitSync(const char* what);
}  // namespace detail

// Called at an implicit wait, before it; `what` names the operation.
inline void checkImplicitSync(const char* what) {
  if (C10_UNLIKELY(detail::sync_debug_mode.load(std::memory_order_relaxed) != 0)) {
    detail::reportImplicitSync(what);
  }
}

}  // namespace spyre
