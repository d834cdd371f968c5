// Which arguments an op writes in place: what its schema declares, plus the
// writes ATen's CPU kernels make without declaring them. The synchronous path
// (what to copy back), the stream sanitizer and the hazard tracker (an op's
// accesses) ask this one function, so an undeclared write is seen by all.
#pragma once

#include <cstddef>

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>

namespace spyre {

// Whether the op of `schema`, called with `args`, writes argument `i` in place.
inline bool writesInPlace(const c10::FunctionSchema& schema, c10::ArrayRef<c10::IValue> args,
                          size_t i) {
  const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
  if (alias != nullptr) return alias->isWrite();
  // native_batch_norm (and its out= overload): in training (argument 5) the
  // CPU kernel updates running_mean and running_var (3 and 4), undeclared.
  return (i == 3 || i == 4) && schema.name() == "aten::native_batch_norm" && args.size() > 5 &&
         args[5].isBool() && args[5].toBool();
}

}  // namespace spyre
