// Formatting shared by error messages.
#pragma once

#include <cstdio>
#include <string>

namespace flex::detail {

inline std::string hexPointer(const void* ptr) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

}  // namespace flex::detail
