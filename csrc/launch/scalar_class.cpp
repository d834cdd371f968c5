#include "launch/scalar_class.h"

#include <cmath>
#include <complex>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>
#include <c10/util/overflows.h>

namespace spyre::launch {
namespace {

// One bit per type Scalar converts to with a check (c10::Scalar's
// accessors); bool never overflows.
template <typename From>
int64_t overflowBits(From v) {
  int64_t bits = 0;
  int bit = 0;
  auto check = [&](bool overflows) { bits |= static_cast<int64_t>(overflows) << bit++; };
  check(c10::overflows<uint8_t, From>(v));
  check(c10::overflows<int8_t, From>(v));
  check(c10::overflows<int16_t, From>(v));
  check(c10::overflows<int32_t, From>(v));
  check(c10::overflows<int64_t, From>(v));
  check(c10::overflows<uint16_t, From>(v));
  check(c10::overflows<uint32_t, From>(v));
  check(c10::overflows<uint64_t, From>(v));
  check(c10::overflows<c10::Half, From>(v));
  check(c10::overflows<c10::BFloat16, From>(v));
  check(c10::overflows<float, From>(v));
  check(c10::overflows<double, From>(v));
  check(c10::overflows<c10::complex<c10::Half>, From>(v));
  check(c10::overflows<c10::complex<float>, From>(v));
  check(c10::overflows<c10::complex<double>, From>(v));
  return bits;
}

// Sign bits above the overflow bits: negative, zero, NaN (none: positive).
constexpr int kSignShift = 16;
int64_t signBits(double v) {
  if (std::isnan(v)) return int64_t{4} << kSignShift;
  if (v < 0) return int64_t{1} << kSignShift;
  if (v == 0) return int64_t{2} << kSignShift;
  return 0;
}

// The value's type in the top bits: an integer and a double of one value do
// not convert alike (uint8 takes -1, wrapped, but not -1.0).
constexpr int kTagShift = 24;

}  // namespace

int64_t scalarClass(const c10::Scalar& value) {
  if (value.isBoolean()) return int64_t{1} << kTagShift;
  if (value.isComplex()) {
    const c10::complex<double> z = value.toComplexDouble();
    return (int64_t{2} << kTagShift) | overflowBits(z) | signBits(z.real()) |
           (signBits(z.imag()) << 4);
  }
  if (value.isFloatingPoint()) {
    const double d = value.toDouble();
    return (int64_t{3} << kTagShift) | overflowBits(d) | signBits(d);
  }
  if (value.isUnsigned()) {
    const uint64_t u = value.toUInt64();
    return (int64_t{4} << kTagShift) | overflowBits(u) | signBits(u == 0 ? 0.0 : 1.0);
  }
  const int64_t i = value.toLong();
  return (int64_t{5} << kTagShift) | overflowBits(i) | signBits(static_cast<double>(i));
}

int64_t scalarClass(const at::Tensor& cpu_scalar) {
  const void* data = cpu_scalar.const_data_ptr();
  switch (cpu_scalar.scalar_type()) {
    // The types Python numbers are wrapped in, read directly: this runs at every call.
    case c10::ScalarType::Double:
      return scalarClass(c10::Scalar(*static_cast<const double*>(data)));
    case c10::ScalarType::Float:
      return scalarClass(c10::Scalar(static_cast<double>(*static_cast<const float*>(data))));
    case c10::ScalarType::Long:
      return scalarClass(c10::Scalar(*static_cast<const int64_t*>(data)));
    case c10::ScalarType::Bool:
      return scalarClass(c10::Scalar(*static_cast<const bool*>(data)));
    default:
      return scalarClass(cpu_scalar.item());
  }
}

}  // namespace spyre::launch
