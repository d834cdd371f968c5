// Conversion of a fill value to the bit pattern of one element of a format.
#pragma once

#include <cstdint>

#include "flex/flex.hpp"

namespace flex::detail {

struct FillElement {
  uint8_t bytes[8];  // the element as stored in memory (host byte order)
  uint8_t width;
};

FillElement fillElement(double value, DataFormats format);

}  // namespace flex::detail
