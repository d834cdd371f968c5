// Meta kernels written here, for ops whose only Meta kernel in torch 2.13 is
// a Python one and which have no C++ CompositeExplicitAutograd kernel to use
// instead (meta_inference.h). Each gives exactly what the op's CPU kernel
// allocates (sizes, strides, dtype) and refuses what it refuses; where the
// CPU kernel's layout or checks are not reproduced, the rule throws, which
// makes the op synchronous (the CPU kernel runs at the call) rather than wrong.
#pragma once

#include <functional>

#include <ATen/core/boxing/KernelFunction.h>

namespace spyre {

using MetaRuleAdder = std::function<void(const char* name, const char* overload, c10::KernelFunction)>;

// Calls `add` once per rule.
void addMetaRules(const MetaRuleAdder& add);

}  // namespace spyre
