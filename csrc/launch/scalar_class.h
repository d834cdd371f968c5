// What a scalar argument's value can change in a CPU kernel that the plan's
// meta run does not see (launch/plan.h): CPU kernels convert Scalars to their
// tensors' dtypes with checked_convert, which raises "value cannot be
// converted to type ... without overflow", and a few check a value's sign
// (hardtanh of uint8 with negative limits). Values of one class behave alike
// in both, so a kernel verified for one value of a class is verified for all.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace spyre::launch {

// The class of a value: one bit per dtype it overflows (as c10::overflows
// decides for its type: double, complex, integer or bool), and its sign.
int64_t scalarClass(const c10::Scalar& value);

// The class of a 0-dim CPU tensor's value (a wrapped Python number, a
// scalar tensor): read where it lies, at every call that passes one.
int64_t scalarClass(const at::Tensor& cpu_scalar);

}  // namespace spyre::launch
