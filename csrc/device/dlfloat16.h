// DLFloat16, the format a Spyre card stores torch's float16 and bfloat16 in
// (docs/tensors.md, "DLFloat16"): 1 sign bit, 6 exponent bits (bias 31), 9
// fraction bits. Every exponent is normal (value = 2^(e-31) * (1 + m/512)),
// except that e = 0, m = 0 is +-0; e = 63, m = 511 is the one code for NaN and
// infinity ("NINF"). No subnormals.
//
// How values become DLFloat16 and come back is a named profile: the card's
// converter is not public, so the emulation follows a stated rule, never the
// card's bits.
#pragma once

#include <cstdint>

namespace spyre::dl16 {

enum class Profile : uint8_t {
  // IBM's published NNP1 conversion (onnx-mlir, DLF16Conversion.hpp): round to
  // nearest, ties away from zero; NaN, infinities and magnitudes that round
  // past the largest finite value give NINF (sign kept); magnitudes that round
  // below 2^-31 * (1 + 1/512) give +-0. NINF reads back as NaN.
  Nnp1,
  // What upstream torch-spyre saw on cards in June 2026: ties toward zero
  // (float16 -2.001953125 -> -2.0, 65504 -> 65472: #1771, #2518, and two of the
  // three ties of #1938), otherwise as Nnp1; NINF reads back as +-infinity
  // (#2518: infinities survive a round trip).
  Card2026_06,
};

// The magnitude bits of NINF; with the sign bit, 0xFFFF.
constexpr uint16_t kNinf = 0x7FFF;

// `value` as DLFloat16 bits under `profile`.
uint16_t encode(float value, Profile profile);
// The value of DLFloat16 `bits`: exact, except NINF (NaN or +-infinity, per profile).
float widen(uint16_t bits, Profile profile);

}  // namespace spyre::dl16
