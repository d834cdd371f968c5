// The card's rules (TORCH_SPYRE_CARD_RULES=1; docs/tensors.md, "Running like a
// card"): what a Spyre card refuses or changes that the emulation, by default,
// lets through. Off by default: every dtype, results equal to CPU's.
//
// With the switch on: only the card's dtypes are allocated and copied (float64
// and the others raise RuntimeError), int64 tensors hold int32 values (copies
// into them narrow as a C cast does, with upstream's downcast warning), and
// device allocations come in whole 128-byte sticks, a tensor's allocation
// holding its default stick layout (its innermost dimension padded to whole
// sticks).
#pragma once

#include <cstddef>

#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>

namespace spyre {

// TORCH_SPYRE_CARD_RULES, read once (at the first spyre allocation, copy or
// capability query): "1" on, unset/empty/"0" off. Any other value raises
// ValueError naming it, on every use, rather than picking a side.
bool cardRules();

// The unit in which the card hands out device memory.
constexpr size_t kStickBytes = 128;
// The bytes an allocation of `nbytes` takes: whole sticks under the card's
// rules, `nbytes` otherwise (0 stays 0).
size_t deviceAllocationBytes(size_t nbytes);
// The bytes a tensor of `sizes` takes in the card's default stick layout
// (torch.spyre.SpyreTensorLayout(sizes, dtype), torch_spyre/layouts.py): one
// row of sticks per index of the outer dimensions, the innermost dimension
// padded to whole sticks of its device format; a scalar takes one stick. 0
// when the card's rules are off or the card does not hold `dtype`.
size_t stickLayoutBytes(c10::IntArrayRef sizes, c10::ScalarType dtype);
// A new tensor's allocation: `compact_nbytes` (PyTorch's strided bytes, which
// hold its elements: kernels compute on them as on CPU) or, when larger, its
// default stick layout's bytes, in whole sticks under the card's rules.
size_t deviceTensorBytes(size_t compact_nbytes, c10::IntArrayRef sizes, c10::ScalarType dtype);

// The dtypes a card holds (upstream torch-spyre's types_mapping.h); int64 is
// among them, stored as int32.
bool isCardDtype(c10::ScalarType dtype);
// Under the card's rules, raises RuntimeError naming `dtype` and the card's
// dtypes when the card does not hold it. `what` completes "spyre cannot
// <what> dtype ...": "allocate a tensor of", "copy to or from a cpu tensor of".
void checkCardDtype(c10::ScalarType dtype, const char* what);
// int64 -> int32 as the card narrows it: the low 32 bits, sign-extended back.
int64_t narrowToInt32(int64_t value);

// Upstream's downcast warning (torch.spyre.get/set_downcast_warning): on by
// default; TORCH_SPYRE_DOWNCAST_WARN=0/false/off turns it off at import.
bool downcastWarning();
void setDowncastWarning(bool enabled);
// Warns (TORCH_WARN_ONCE, as upstream) that int64 is stored as int32, when the
// warning is on. Host threads only: a warning needs the caller's handler.
void warnInt64Downcast();

}  // namespace spyre
