// The launch path's view of an op's boxed arguments (launch/launch.h): walking
// the tensors of an argument, and CUDA's device rule, checked once per op.
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "runtime/runtime.h"

namespace spyre::launch {

using torch::jit::Stack;

inline bool isSpyre(const at::Tensor& t) {
  return t.defined() && t.is_privateuseone();
}

// Calls fn(tensor) for every tensor of an argument (a Tensor, a Tensor[] or a
// Tensor?[]); undefined entries included.
template <class Fn>
void forEachTensor(const c10::IValue& value, Fn&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

// True when an argument is a Tensor, a Tensor[] or a list holding a tensor.
bool holdsTensors(const c10::IValue& value);

// CUDA's rule: every tensor on the op's device, except 0-dim CPU tensors
// (scalars). CPU index tensors of index ops are moved to the device first.
// Returns the op's device, checked: that of its spyre tensors, or of a spyre
// device argument (factories), or the current device.
CheckedDevice checkDevices(const c10::OperatorHandle& op, Stack* stack, size_t first);

// The op's arguments (from `first` on the stack) replaced by its returns.
void replaceArgsWithReturns(Stack* stack, size_t num_args, std::vector<c10::IValue> returns);

}  // namespace spyre::launch
