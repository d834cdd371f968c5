// Which streams use a tensor's memory: the one rule for every launch path.
//
// The caching allocator hands a freed block to the next allocation on its
// allocation stream at once (stream order). Work queued on another stream that
// reads or writes the block must be recorded on it, so the block is reused only
// once that work has finished (docs/tensors.md). Eager launches
// (launch/launch.cpp) and torch.compile's kernels (aten/compiled_kernel.h) both
// record every spyre tensor argument here, so a program's results do not
// change when it is compiled.
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/stream.h"

namespace spyre {

// Device work queued on `stream` uses `t`: its block is not reused before that
// work has finished. Ignores undefined, storage-less and non-spyre tensors.
// While `stream` captures a graph, the graph also keeps `t`'s storage alive
// (until its reset) unless it is in the capture's pool: an input freed by the
// program is still there for every replay (docs/graphs.md).
void recordUse(const at::Tensor& t, const SpyreStream& stream);

}  // namespace spyre
