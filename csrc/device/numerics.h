// TORCH_SPYRE_NUMERICS: what a float16 or bfloat16 value in device memory is
// (docs/tensors.md, "DLFloat16"). "ieee" (the default): torch's own format,
// values equal to CPU's. "dl16" (the default under TORCH_SPYRE_CARD_RULES=1):
// a DLFloat16 value, as on a card, rounded when it is written (host copies,
// converting copies, fills, every op's and compiled kernel's outputs, graph
// replays of those) and read back exactly. Device memory keeps torch's bytes:
// each holds the value the DLFloat16 code reads back as, so reads, views and
// same-dtype copies need nothing. Arithmetic computes as CPU does; only its
// results are rounded (the card's ALU rounding is not public).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/ScalarType.h>
#include <c10/macros/Macros.h>

#include "device/dlfloat16.h"

namespace spyre {

namespace numerics_detail {
enum State : uint8_t { kUnresolved, kIeee, kDl16 };
extern std::atomic<uint8_t> state;
void resolve();
}  // namespace numerics_detail

// Reads TORCH_SPYRE_NUMERICS once: "ieee", "dl16" (profile nnp1),
// "dl16:nnp1" or "dl16:card-2026-06"; unset or empty: "dl16" under the card's
// rules, else "ieee". Any other value raises ValueError naming it, on every
// call. Called at every device allocation (host threads), so the setting is
// known before anything is written to device memory.
inline void resolveNumerics() {
  if (C10_UNLIKELY(numerics_detail::state.load(std::memory_order_relaxed) ==
                   numerics_detail::kUnresolved)) {
    numerics_detail::resolve();
  }
}

// Whether writes round to DLFloat16. With the switch off this one relaxed load
// and its branch are all a write pays.
inline bool dl16Writes() {
  return numerics_detail::state.load(std::memory_order_relaxed) == numerics_detail::kDl16;
}

// "ieee", "dl16:nnp1" or "dl16:card-2026-06" (resolves the setting).
std::string numericsName();

// The profile a name after "dl16:" stands for; ValueError for another name.
dl16::Profile profileNamed(const std::string& name);

// Whether device memory of `dtype` holds DLFloat16 values when the switch is on.
inline bool isDl16Dtype(c10::ScalarType dtype) {
  return dtype == c10::kHalf || dtype == c10::kBFloat16;
}

// The stored bits of a float16 or bfloat16 value (`bits`, torch's) under
// `profile`: the DLFloat16 value it rounds to, as that dtype reads it back.
uint16_t storedBits(c10::ScalarType dtype, uint16_t bits, dl16::Profile profile);

// Rounds `t` (a CPU tensor, or a CPU alias of device memory inside device
// work) in place to the active profile's stored values, when the switch is on
// and its dtype is float16 or bfloat16. Returns how many finite values became
// NaN or infinity (the card's range exceeded).
int64_t roundToDl16(const at::Tensor& t);
// `value` as a fill of `dtype` stores it; `overflowed` set when a finite value
// became NaN or infinity.
at::Scalar roundedFillValue(c10::ScalarType dtype, const at::Scalar& value, bool& overflowed);

// numerics_report(): finite values each op turned into NaN or infinity by
// rounding to DLFloat16, per op name, since the process started (or the last
// reset). Recording takes a lock: only ops that overflowed pay it.
void recordOverflow(const std::string& op, int64_t count);
std::vector<std::pair<std::string, int64_t>> overflowReport();
void resetOverflowReport();

}  // namespace spyre
