// Error state of streams and of the device, as upstream torch-spyre exposes it.
//
// The flex runtime latches a failed operation on its stream: the next
// synchronize()/query() throws the failure once, later launches onto the stream
// throw, and the stream stays failed for the rest of the process (other streams
// keep working). These functions report that state without throwing and
// without consuming the pending failure.
#pragma once

#include "runtime/stream.h"

namespace spyre {

// Values match upstream; 2-5 are reserved there (HardwareFault, Timeout,
// MemoryFault, CoreUnavailable).
enum class SpyreStreamError : int { Success = 0, Shutdown = 1 };

enum class SpyreDeviceState : int { Ok = 0, NotInitialized = 1, StreamError = 2 };

// "Success", "Shutdown", or "Unknown" for any other value.
const char* SpyreStreamGetErrorString(SpyreStreamError error) noexcept;

// Shutdown iff the stream's flex handle has latched a failure. Raises like
// resolveRuntimeHandle() for an id the pool never mapped.
SpyreStreamError SpyreStreamGetError(const SpyreStream& stream);

// NotInitialized while torch-spyre holds no runtime (before the runtime
// starts, and after free_runtime()); StreamError if any stream of the runtime
// is latched; else Ok. Never starts the runtime, never cached.
SpyreDeviceState SpyreGetDeviceState() noexcept;

}  // namespace spyre
