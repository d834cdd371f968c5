// The launch path: how an ATen op without a dedicated spyre kernel runs on
// the device (docs/tensors.md, "Compute on streams").
//
// At the call, on the host:
//  1. devices are checked (CUDA's "Expected all tensors to be on the same
//     device" error; 0-dim CPU tensors are scalars and allowed);
//  2. output sizes, strides and dtypes come from the op's meta kernel, run on
//     meta tensors with the arguments' metadata (so shape, dtype and argument
//     errors are raised here, as CPU raises them). The result is cached per
//     thread by the exact argument metadata: a loop pays for it once;
//  3. outputs are allocated from the caching allocator (out= arguments are
//     resized, views are restrided over their base);
//  4. the CPU kernel is launched on the current stream: it runs on the
//     stream's engine, in stream order, over CPU aliases of device memory.
//     Functional ops run as their out= variant, writing straight into the
//     outputs. The first call of each kernel and dtype signature is first
//     run on the host over zeroed scratch memory of the same layout: a dtype
//     the CPU kernel rejects raises at the call and never reaches a stream.
//     (If the scratch run fails for another reason, the op runs at the call
//     on the real data, after the stream's earlier work, and raises what it
//     raises there.)
//
// Ops that cannot be asynchronous (data-dependent output shapes, host values,
// no meta kernel, random ops, ops outside the aten namespace) take the
// synchronous path (launch/sync_path.h): wait for the current stream, run the
// CPU kernel on the calling thread, queue the writes of its results on the
// stream, return.
#pragma once

#include <functional>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "launch/cpu_kernel_scope.h"
#include "runtime/stream.h"

namespace spyre {

// The boxed fallback for every op without a spyre kernel.
void launchOp(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// launchOp for a stack whose tensors are borrowed, not counted
// (c10::MaybeOwnedTraits<at::Tensor>::createBorrow of the caller's
// arguments): the unboxed kernels of the hottest ops (launch/hot_ops.cpp). A
// tensor Python owns takes the GIL when a second C++ reference to it is made
// or dropped (c10's PyObjectSlot); borrowing makes none. The stack's borrowed
// tensors are released uncounted (or counted for the synchronous path); an
// in-place op's return (an argument) comes back as None: the caller returns
// its own reference.
void launchOpBorrowed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// launchOp, computing with `compute_op` (same arguments and returns) for shape
// inference and on the CPU: ops such as convolution_overrideable, whose CPU
// counterpart has another name.
void launchOpComputedBy(const c10::OperatorHandle& op, const c10::OperatorHandle& compute_op,
                torch::jit::Stack* stack);

// The first time a `signature` (a kernel and its dtypes) is seen, `verify`
// runs on the calling thread, on scratch data, before the work is launched:
// an error it raises (a dtype the kernel rejects) reaches the caller and not
// the stream.
void verifySignature(const std::string& signature, const std::function<void()>& verify);

// Registers the launch path for the functional and in-place forms of
// structured ops (launch/fallback.cpp). Once, after static registration.
void registerFunctionalForms();

}  // namespace spyre
