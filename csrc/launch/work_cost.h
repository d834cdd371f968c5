// What one kernel launch does on the card, for the card time model
// (FLEX_STUB_TIMING=card, docs/timing.md): multiply-adds and the matmul class
// of matmul-class, attention and convolution ops, bytes read and written and
// the memory pattern for every op.
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>
#include <flex/flex.hpp>

namespace spyre::launch {

// True for matmul-class and convolution ops (those with multiply-adds in
// their cost), whose CPU kernels split small problems across threads.
bool contracts(const c10::FunctionSchema& schema);

// True when the runtime models card time; fixed once the runtime runs.
bool cardTiming();

// The cost of `schema` called with `args` (its arguments, out= ones included)
// producing `returns`: bytes read are the tensor arguments that are not out=
// arguments, bytes written the returned tensors.
flex::WorkCost workCost(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                        c10::ArrayRef<c10::IValue> returns);

// The cost of a strided or converting copy of `src` into `dst` (same shape):
// a materialised transpose is a stick-plane transport.
flex::WorkCost copyCost(const at::Tensor& src, const at::Tensor& dst);

}  // namespace spyre::launch
