// Copies between spyre and CPU tensors queued on a stream (aten/kernels.cpp):
// how every host write into device memory is ordered on the stream.
#pragma once

#include <functional>

#include <ATen/core/Tensor.h>

#include "runtime/stream.h"

namespace spyre {

// `dst` <- `src`, on `stream`. Device blocks are recorded on the stream. A
// pinned host block is recorded with the host allocator, as CUDA does, so it is
// not reused before the copy ran (false when it is not one of its blocks: the
// caller must then wait). Host memory the caller owns alone (a random draw, a
// synchronous op's result) travels in `keep_alive`, which must hold no
// Python-visible object. `non_blocking`: the caller returns without waiting
// for the copy, whose pinned host side the stream sanitizer then tracks.
// `op`: the operation the stream sanitizer names in a report when the copy
// carries another op's result (a random fill drawn on the host); nullptr: the
// copy's own direction (H2D, D2H, D2D).
bool launchCopy(const SpyreStream& stream, const at::Tensor& src, const at::Tensor& dst,
                std::function<void()> keep_alive = {}, bool non_blocking = false,
                const char* op = nullptr);

}  // namespace spyre
