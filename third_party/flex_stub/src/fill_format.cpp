// Fill values as element bit patterns. Floating formats round to nearest even,
// converting through float as c10::Half / c10::BFloat16 do, so a device fill
// matches the CPU tensor bit for bit.
#include "fill_format.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace flex::detail {
namespace {

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// IEEE binary16, round to nearest even (F. Giesen's float_to_half_fast3_rtne).
uint16_t halfBits(float value) {
  uint32_t bits = floatBits(value);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint16_t half;
  if (bits >= (127u + 16u) << 23) {
    // Too large for a half (or inf/NaN): inf, or a quiet NaN.
    half = bits > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (bits < 113u << 23) {
    // Subnormal or zero: let the FPU round by adding a magic number whose
    // exponent lines the half's last mantissa bit up with the float's.
    const uint32_t magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    half = static_cast<uint16_t>(floatBits(bitsFloat(bits) + bitsFloat(magic)) - magic);
  } else {
    const uint32_t mantissa_odd = (bits >> 13) & 1u;
    bits += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mantissa_odd;
    half = static_cast<uint16_t>(bits >> 13);
  }
  return static_cast<uint16_t>(half | (sign >> 16));
}

uint16_t bfloat16Bits(float value) {
  const uint32_t bits = floatBits(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// Truncates toward zero like a C cast, but defined everywhere: NaN is 0 and
// values beyond int64 saturate. Narrower formats then keep the low bits.
int64_t wrappedInt(double value) {
  if (std::isnan(value)) return 0;
  if (value >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
  if (value <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

template <class T>
FillElement element(T value) {
  FillElement result{};
  std::memcpy(result.bytes, &value, sizeof value);
  result.width = sizeof value;
  return result;
}

}  // namespace

FillElement fillElement(double value, DataFormats format) {
  switch (format) {
    case DataFormats::FP32: return element(static_cast<float>(value));
    case DataFormats::FP16: return element(halfBits(static_cast<float>(value)));
    case DataFormats::BF16: return element(bfloat16Bits(static_cast<float>(value)));
    case DataFormats::INT8: return element(static_cast<uint8_t>(wrappedInt(value)));
    case DataFormats::INT16: return element(static_cast<uint16_t>(wrappedInt(value)));
    case DataFormats::INT32: return element(static_cast<uint32_t>(wrappedInt(value)));
    case DataFormats::INT64: return element(wrappedInt(value));
    case DataFormats::BYTES: return element(static_cast<uint8_t>(wrappedInt(value)));
  }
  throw Error("flex: fillAsync: unknown DataFormats value " +
              std::to_string(static_cast<int>(format)));
}

}  // namespace flex::detail
