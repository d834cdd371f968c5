// What device work may capture of a tensor: a plain description, never the
// tensor itself.
//
// The rule for engine threads (docs/reliability.md): device work runs on the
// runtime's engine threads, which must never acquire the GIL or run Python.
// An at::Tensor captured by a queued operation would drop its last reference
// on the engine when the operation is destroyed, and a TensorImpl (or
// StorageImpl) owned by a Python object takes the GIL to release it. So
// operations capture TensorRefs (address, layout, dtype) and build CPU
// aliases of device memory on the engine. Memory stays valid the way it does
// on CUDA: the caching allocator reuses a block only in stream order, or after
// the work of every stream recorded on it (recordStream) has finished.
#pragma once

#include <array>
#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

namespace spyre {

struct TensorRef {
  void* storage_base = nullptr;  // start of the storage (device or pinned host memory)
  size_t storage_nbytes = 0;
  int64_t storage_offset = 0;  // in elements, as the tensor's
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;
  bool neg = false;
  // A 0-dim CPU tensor (a scalar argument) travels by value: the host may free
  // or change it as soon as the launch returns.
  bool cpu_scalar = false;
  bool wrapped_number = false;
  std::array<char, 16> scalar_bytes{};  // the value of a cpu_scalar

  // Captures `t`: a spyre tensor, a pinned host tensor, or a 0-dim CPU tensor.
  static TensorRef of(const at::Tensor& t);
  // The same, into this (default-constructed) ref: no move of the sizes and
  // strides, for refs built in place in a container.
  void capture(const at::Tensor& t);

  // A CPU tensor over the same memory and layout (or holding the scalar): for
  // device memory, over the executors' view (flex::executorAddress), so only
  // device work may use it. It owns nothing: valid while the memory is, i.e.
  // inside the device work.
  at::Tensor cpuAlias() const;
  // Makes `alias`, a tensor cpuAlias() made for another ref that nothing else
  // holds, this ref's alias (its memory, layout and dtype, or its scalar
  // value), allocating nothing. False (and `alias` unchanged) when it cannot:
  // a scalar for a tensor or the other way round, another scalar dtype.
  bool repoint(at::Tensor& alias) const;
  // A cpu_scalar holding a Python number (wrapped_number): its value
  // converted to `dtype` (a real, non-reduced dtype), as copying it to a
  // tensor of that dtype would.
  void convertScalar(c10::ScalarType dtype);
};

// A CPU tensor over the executors' view of spyre tensor `t`'s memory (same
// sizes, strides and dtype; flex::executorAddress) that keeps `t`'s storage
// alive while it lives. How spyreccl hands device memory to gloo, which plays
// the card's collective engine (its DMA peer) as ATen's CPU kernels play its
// compute engine (docs/distributed.md, "Direct"): only gloo's threads touch it,
// and only while the collective's peer access window is open on the group's
// communication stream (python/peer_window_bindings.cpp). Refuses conj/neg
// views (the bits would be lost).
at::Tensor peerAccessView(const at::Tensor& t);

}  // namespace spyre
