// What an ATen-level operation reads and writes, for the stream sanitizer (runtime/sanitizer.h).
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "runtime/capture.h"
#include "runtime/sanitizer.h"

namespace spyre::sanitizer {

// Whether a launch describes its accesses (onLaunch): for the sanitizer, or
// for a capture, whose graph checks them at each replay.
inline bool accessesWanted() {
  return enabled() || capture::anyCapture();
}

// Adds `t`'s bytes if it is a defined spyre tensor with storage.
void addTensor(std::vector<Access>& out, const at::Tensor& t, bool write);

// Adds `t`'s bytes, whatever its device (a defined tensor with storage).
void addTensorBytes(std::vector<Access>& out, const at::Tensor& t, bool write);

// An op's accesses: every spyre tensor argument is read, or written where the
// schema marks it written (in-place, out=); every new output is written.
std::vector<Access> opAccesses(const c10::FunctionSchema& schema, const torch::jit::Stack& args,
                               c10::ArrayRef<c10::IValue> new_outputs);

// "aten::mul.Tensor": the op as the profiler names it.
std::string opName(const c10::OperatorHandle& op);

}  // namespace spyre::sanitizer
