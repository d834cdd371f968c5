#include "device/dlfloat16.h"

#include <cstring>
#include <limits>

namespace spyre::dl16 {
namespace {

constexpr uint32_t kFp32Magnitude = 0x7FFFFFFF;
constexpr uint32_t kFp32Infinity = 0x7F800000;
constexpr int kFp32Bias = 127;
constexpr int kBias = 31;
constexpr int kDroppedBits = 23 - 9;  // fp32 fraction bits DLFloat16 has no room for

}  // namespace

uint16_t encode(float value, Profile profile) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & kFp32Magnitude;
  if (magnitude >= kFp32Infinity) return sign | kNinf;  // infinities and NaN
  // Rounding adds half of the dropped bits' unit (ties away from zero) or just
  // under half (ties toward zero) to the magnitude; a carry out of the
  // fraction lands in the exponent, which is the right result.
  const uint32_t half = uint32_t{1} << (kDroppedBits - 1);
  const uint32_t rounded = magnitude + (profile == Profile::Nnp1 ? half : half - 1);
  const int exponent = static_cast<int>(rounded >> 23) - kFp32Bias + kBias;
  const uint32_t fraction = (rounded >> kDroppedBits) & 0x1FF;
  if (exponent < 0) return sign;  // below DLFloat16's smallest normal: +-0
  if (exponent > 63 || (exponent == 63 && fraction == 0x1FF)) return sign | kNinf;
  return static_cast<uint16_t>(sign | (exponent << 9) | fraction);
}

float widen(uint16_t bits, Profile profile) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  const uint32_t magnitude = bits & 0x7FFF;
  if (magnitude == kNinf) {
    if (profile == Profile::Nnp1) return std::numeric_limits<float>::quiet_NaN();
    return sign != 0 ? -std::numeric_limits<float>::infinity()
                     : std::numeric_limits<float>::infinity();
  }
  uint32_t result = sign;
  if (magnitude != 0) {
    const uint32_t exponent = (magnitude >> 9) - kBias + kFp32Bias;
    result |= (exponent << 23) | ((magnitude & 0x1FF) << kDroppedBits);
  }
  float value = 0;
  std::memcpy(&value, &result, sizeof value);
  return value;
}

}  // namespace spyre::dl16
