// Device and pinned-host memory for spyre tensors (docs/tensors.md).
//
// Both allocators cache. Device blocks come from the stream-aware block pools
// of device/caching_allocator.h; pinned host blocks from ATen's caching host
// allocator over the runtime's pinned memory. A block used by device work on a
// stream other than its allocation stream (recordStream / recordPinnedUse) is
// reused only after that work has finished.
#pragma once

#include <cstdint>
#include <utility>

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Storage.h>

#include "device/memory_history.h"
#include "runtime/stream.h"

namespace spyre {

// The c10::DeviceAllocator registered for PrivateUse1.
c10::Allocator* deviceAllocator();
// deviceAllocator()->allocate(nbytes) on a device this op checked: the
// launch path checks its device once per op.
c10::DataPtr allocate(size_t nbytes, CheckedDevice device);
// Keep the block behind `data_ptr` from being reused until the work launched
// on `stream` so far has finished. Ignores pointers this allocator did not make.
void recordStream(const c10::DataPtr& data_ptr, const SpyreStream& stream);
// The same for a pinned host block named by work on `stream`. False when the
// pinned host allocator did not make it (the caller must keep it alive).
bool recordPinnedUse(const c10::DataPtr& data_ptr, const SpyreStream& stream);
// Give `storage` a new block of `new_bytes`, its old bytes copied over in
// stream order on the current stream (no host synchronization). On
// out-of-memory the storage is left unchanged.
void resizeStorageBytes(const c10::Storage& storage, size_t new_bytes);

// Graphs: a graph holds the private pool `id` (allocations on its capturing
// streams come from it), and lets go of it (device/caching_allocator.h).
void useGraphPool(std::pair<uint64_t, uint64_t> id);
void releaseGraphPool(std::pair<uint64_t, uint64_t> id);
// Whether the block behind `data_ptr` came from the private pool `id`.
bool allocatedInGraphPool(const c10::DataPtr& data_ptr, std::pair<uint64_t, uint64_t> id);

// Memory history and snapshots of the device allocator (device/memory_history.h).
void recordMemoryHistory(const HistorySettings& settings);
MemorySnapshot memorySnapshot();
// Block objects the caching allocator has allocated (tests: splits reuse the
// objects merges give back).
int64_t blockObjectsMade();

// The at::HostAllocator registered for PrivateUse1 (pinned host memory).
c10::Allocator* pinnedHostAllocator();
bool isPinnedPtr(const void* ptr);
// The device of a device pointer; raises for a pointer that is not one.
c10::Device deviceFromPtr(void* ptr);

}  // namespace spyre
