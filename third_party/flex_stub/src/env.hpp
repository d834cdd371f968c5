// Environment variable parsing shared by device enumeration and context config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace flex::detail {

// The value of `name`, or nullopt when it is unset.
std::optional<std::string> envValue(const char* name);

// `text` (surrounding blanks allowed) as an integer in [min_value, max_value].
// Throws flex::Error naming `name`, `text` and the expected range otherwise.
int64_t parseInt(const char* name, const std::string& text, int64_t min_value,
                 int64_t max_value);

// The integer variable `name`, or `fallback` when it is unset.
int64_t envInt(const char* name, int64_t fallback, int64_t min_value, int64_t max_value);

// The variable `name` as a finite number > 0, or nullopt when it is unset.
std::optional<double> envPositiveDouble(const char* name);

// The variable `name` as a finite number >= 0, or nullopt when it is unset.
std::optional<double> envNonNegativeDouble(const char* name);

}  // namespace flex::detail
