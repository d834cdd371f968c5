// Unboxed kernels for the hottest ops (launch/launch.h, launchOpBorrowed):
// arithmetic, which a training step and every small-op loop call most (the
// Scalar overloads decompose into these: a Python number arrives as a wrapped
// 0-dim tensor). The
// boxed fallback receives a stack the dispatcher built by copying each
// argument: a second reference to a tensor Python owns, made and dropped
// under the GIL (two GIL acquisitions per op that CPU eager does not pay).
// These kernels borrow the arguments instead, and launch exactly as the
// fallback does.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/Scalar.h>
#include <c10/util/MaybeOwned.h>
#include <torch/library.h>

#include "launch/launch.h"

namespace spyre {
namespace {

using torch::jit::Stack;

void push(Stack& stack, const at::Tensor& t) {
  stack.emplace_back(c10::MaybeOwnedTraits<at::Tensor>::createBorrow(t));
}
void push(Stack& stack, const c10::Scalar& s) { stack.emplace_back(s); }

// Op names as types, so that each kernel finds its handle once.
#define SPYRE_HOT_OP(ident, name, overload)                                        \
  struct ident {                                                                   \
    static const c10::OperatorHandle& handle() {                                   \
      static const c10::OperatorHandle op =                                        \
          c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);          \
      return op;                                                                   \
    }                                                                              \
  };

template <class Op, class Signature>
struct Hot;

// A functional op: its one result, a new tensor.
template <class Op, class... Args>
struct Hot<Op, at::Tensor(Args...)> {
  static at::Tensor call(Args... args) {
    Stack stack;
    stack.reserve(sizeof...(Args));
    (push(stack, args), ...);
    launchOpBorrowed(Op::handle(), &stack);
    return std::move(stack.back()).toTensor();
  }
};

// An in-place op: it returns its first argument, as the caller holds it.
template <class Op, class... Args>
struct Hot<Op, at::Tensor&(at::Tensor&, Args...)> {
  static at::Tensor& call(at::Tensor& self, Args... args) {
    Stack stack;
    stack.reserve(1 + sizeof...(Args));
    push(stack, self);
    (push(stack, args), ...);
    launchOpBorrowed(Op::handle(), &stack);
    return self;
  }
};

using T = const at::Tensor&;
using S = const c10::Scalar&;

SPYRE_HOT_OP(AddTensor, "aten::add", "Tensor")
SPYRE_HOT_OP(AddTensorInPlace, "aten::add_", "Tensor")
SPYRE_HOT_OP(SubTensor, "aten::sub", "Tensor")
SPYRE_HOT_OP(SubTensorInPlace, "aten::sub_", "Tensor")
SPYRE_HOT_OP(MulTensor, "aten::mul", "Tensor")
SPYRE_HOT_OP(MulTensorInPlace, "aten::mul_", "Tensor")
SPYRE_HOT_OP(DivTensor, "aten::div", "Tensor")
SPYRE_HOT_OP(DivTensorInPlace, "aten::div_", "Tensor")

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN((Hot<AddTensor, at::Tensor(T, T, S)>::call)));
  m.impl("add_.Tensor", TORCH_FN((Hot<AddTensorInPlace, at::Tensor&(at::Tensor&, T, S)>::call)));
  m.impl("sub.Tensor", TORCH_FN((Hot<SubTensor, at::Tensor(T, T, S)>::call)));
  m.impl("sub_.Tensor", TORCH_FN((Hot<SubTensorInPlace, at::Tensor&(at::Tensor&, T, S)>::call)));
  m.impl("mul.Tensor", TORCH_FN((Hot<MulTensor, at::Tensor(T, T)>::call)));
  m.impl("mul_.Tensor", TORCH_FN((Hot<MulTensorInPlace, at::Tensor&(at::Tensor&, T)>::call)));
  m.impl("div.Tensor", TORCH_FN((Hot<DivTensor, at::Tensor(T, T)>::call)));
  m.impl("div_.Tensor", TORCH_FN((Hot<DivTensorInPlace, at::Tensor&(at::Tensor&, T)>::call)));
}

}  // namespace
}  // namespace spyre
