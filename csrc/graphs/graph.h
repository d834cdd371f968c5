// Graphs on spyre (docs/graphs.md): torch.accelerator.Graph's implementation is
// registered in graph.cpp; this is what other layers use of it.
#pragma once

#include <c10/core/Allocator.h>

namespace spyre {

// A new private-pool id, {0, n}, as CUDA's graph_pool_handle(): graphs given
// the same id share a pool.
c10::MempoolId_t newGraphPoolId();

}  // namespace spyre
