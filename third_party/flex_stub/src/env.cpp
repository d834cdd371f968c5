// Environment parsing: every malformed value is reported with its variable name.
#include "env.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "flex/flex.hpp"

namespace flex::detail {
namespace {

std::string trimmed(const std::string& text) {
  const char* blanks = " \t\n\r";
  const size_t begin = text.find_first_not_of(blanks);
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(blanks) - begin + 1);
}

std::string quoted(const char* name, const std::string& text) {
  return std::string("flex: ") + name + "='" + text + "'";
}

}  // namespace

std::optional<std::string> envValue(const char* name) {
  const char* value = std::getenv(name);
  if (!value) return std::nullopt;
  return std::string(value);
}

int64_t parseInt(const char* name, const std::string& text, int64_t min_value,
                 int64_t max_value) {
  const std::string digits = trimmed(text);
  char* end = nullptr;
  errno = 0;
  const long long value = digits.empty() ? 0 : std::strtoll(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0') {
    throw Error(quoted(name, text) + " is not an integer");
  }
  if (errno == ERANGE || value < min_value || value > max_value) {
    std::string expected = "must be >= " + std::to_string(min_value);
    if (max_value != INT64_MAX) expected += " and <= " + std::to_string(max_value);
    throw Error(quoted(name, text) + " is out of range: it " + expected);
  }
  return value;
}

int64_t envInt(const char* name, int64_t fallback, int64_t min_value, int64_t max_value) {
  const std::optional<std::string> value = envValue(name);
  return value ? parseInt(name, *value, min_value, max_value) : fallback;
}

namespace {
// `name` as a finite number, at least 0 or (strictly) above it.
std::optional<double> envNumber(const char* name, bool zero_allowed) {
  const std::optional<std::string> value = envValue(name);
  if (!value) return std::nullopt;
  const std::string text = trimmed(*value);
  char* end = nullptr;
  const double number = text.empty() ? 0 : std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0') throw Error(quoted(name, *value) + " is not a number");
  if (!std::isfinite(number) || number < 0 || (number == 0 && !zero_allowed)) {
    throw Error(quoted(name, *value) + " is out of range: it must be a finite number " +
                (zero_allowed ? ">= 0" : "> 0"));
  }
  return number;
}
}  // namespace

std::optional<double> envPositiveDouble(const char* name) { return envNumber(name, false); }

std::optional<double> envNonNegativeDouble(const char* name) { return envNumber(name, true); }

}  // namespace flex::detail
