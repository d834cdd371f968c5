#include "device/card_rules.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include <c10/util/Exception.h>
#include <c10/util/safe_numerics.h>

namespace spyre {
namespace {

struct CardRulesSetting {
  bool on = false;
  std::string error;  // a bad value, reported on every use
};

CardRulesSetting parseCardRules() {
  const char* env = std::getenv("TORCH_SPYRE_CARD_RULES");
  if (env == nullptr || *env == '\0' || std::string(env) == "0") {
    return {};
  }
  if (std::string(env) == "1") {
    return {true, ""};
  }
  return {false, std::string("TORCH_SPYRE_CARD_RULES='") + env +
                     "' is not a valid setting (expected 1: the card's data-type rules, or 0 / "
                     "unset: every dtype, results equal to CPU's)"};
}

// The card's dtypes, in the order the messages list them.
constexpr c10::ScalarType kCardDtypes[] = {
    c10::kBool,  c10::kByte, c10::kChar,     c10::kShort, c10::kInt,
    c10::kLong,  c10::kHalf, c10::kBFloat16, c10::kFloat, c10::kFloat8_e4m3fn,
    c10::kFloat8_e5m2fnuz,
};

std::string cardDtypeNames() {
  std::string names;
  for (const c10::ScalarType dtype : kCardDtypes) {
    if (!names.empty()) names += ", ";
    names += "torch.";
    names += c10::getDtypeNames(dtype).first;
    if (dtype == c10::kLong) names += " (stored as int32)";
  }
  return names;
}

// The bytes of one element in the card's device format (upstream's
// types_mapping.h): bool and bfloat16 are DLFloat16, uint8 is a 32-bit
// SENUINT32, int64 is stored as int32.
size_t deviceElementBytes(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kChar:
    case c10::kFloat8_e4m3fn:
    case c10::kFloat8_e5m2fnuz:
      return 1;
    case c10::kBool:
    case c10::kShort:
    case c10::kHalf:
    case c10::kBFloat16:
      return 2;
    default:  // kByte, kInt, kLong, kFloat
      return 4;
  }
}

std::atomic<bool> downcast_warning{true};

}  // namespace

bool cardRules() {
  static const CardRulesSetting setting = parseCardRules();
  TORCH_CHECK_VALUE(setting.error.empty(), setting.error);
  return setting.on;
}

size_t deviceAllocationBytes(size_t nbytes) {
  if (!cardRules()) {
    return nbytes;
  }
  return (nbytes + kStickBytes - 1) / kStickBytes * kStickBytes;
}

size_t stickLayoutBytes(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  if (!cardRules() || !isCardDtype(dtype)) {
    return 0;
  }
  if (sizes.empty()) {
    return kStickBytes;
  }
  const auto per_stick = static_cast<uint64_t>(kStickBytes / deviceElementBytes(dtype));
  uint64_t bytes = (static_cast<uint64_t>(sizes.back()) + per_stick - 1) / per_stick * kStickBytes;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    TORCH_CHECK(!c10::mul_overflows(bytes, static_cast<uint64_t>(sizes[i]), &bytes),
                "spyre: the stick layout of a tensor of size ", sizes, " overflows 64 bits");
  }
  return static_cast<size_t>(bytes);
}

size_t deviceTensorBytes(size_t compact_nbytes, c10::IntArrayRef sizes, c10::ScalarType dtype) {
  return deviceAllocationBytes(std::max(compact_nbytes, stickLayoutBytes(sizes, dtype)));
}

bool isCardDtype(c10::ScalarType dtype) {
  for (const c10::ScalarType card : kCardDtypes) {
    if (card == dtype) return true;
  }
  return false;
}

void checkCardDtype(c10::ScalarType dtype, const char* what) {
  if (!cardRules() || isCardDtype(dtype)) {
    return;
  }
  TORCH_CHECK(false, "spyre cannot ", what, " dtype torch.", c10::getDtypeNames(dtype).first,
              ": a Spyre card does not support it (TORCH_SPYRE_CARD_RULES=1); the card supports ",
              cardDtypeNames());
}

int64_t narrowToInt32(int64_t value) {
  // Two's complement truncation, spelled without the implementation-defined
  // signed conversion of C++17.
  const auto low = static_cast<uint32_t>(static_cast<uint64_t>(value));
  return low >= 0x80000000u ? static_cast<int64_t>(low) - (int64_t{1} << 32)
                            : static_cast<int64_t>(low);
}

bool downcastWarning() {
  return downcast_warning.load(std::memory_order_relaxed);
}

void setDowncastWarning(bool enabled) {
  downcast_warning.store(enabled, std::memory_order_relaxed);
}

void warnInt64Downcast() {
  if (!downcastWarning()) {
    return;
  }
  TORCH_WARN_ONCE(
      "spyre: a Spyre card does not support int64; int64 tensors are stored as int32 on the "
      "device (TORCH_SPYRE_CARD_RULES=1), so values outside the int32 range change: they keep "
      "their low 32 bits (2**31 becomes -2**31). Silence this with "
      "torch.spyre.set_downcast_warning(False), warnings.filterwarnings(...) or "
      "TORCH_SPYRE_DOWNCAST_WARN=0.");
}

}  // namespace spyre
