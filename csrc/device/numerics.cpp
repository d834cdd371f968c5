#include "device/numerics.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include "device/card_rules.h"

namespace spyre {
namespace numerics_detail {
std::atomic<uint8_t> state{kUnresolved};
}  // namespace numerics_detail

namespace {

struct NumericsSetting {
  bool dl16 = false;
  dl16::Profile profile = dl16::Profile::Nnp1;
  std::string error;  // a bad value, reported on every use
};

constexpr const char* kExpected =
    "(expected ieee: float16 and bfloat16 as CPU holds them, dl16 or dl16:nnp1: DLFloat16 with "
    "IBM's published NNP1 rounding, dl16:card-2026-06: DLFloat16 as cards rounded in June 2026; "
    "unset: dl16 under TORCH_SPYRE_CARD_RULES=1, else ieee)";

const char* profileName(dl16::Profile profile) {
  return profile == dl16::Profile::Nnp1 ? "nnp1" : "card-2026-06";
}

bool knownProfile(const std::string& name, dl16::Profile& profile) {
  if (name == "nnp1") {
    profile = dl16::Profile::Nnp1;
  } else if (name == "card-2026-06") {
    profile = dl16::Profile::Card2026_06;
  } else {
    return false;
  }
  return true;
}

NumericsSetting parseNumerics() {
  const char* env = std::getenv("TORCH_SPYRE_NUMERICS");
  const std::string value = env == nullptr ? "" : env;
  NumericsSetting setting;
  if (value.empty()) {
    setting.dl16 = cardRules();
  } else if (value == "dl16") {
    setting.dl16 = true;
  } else if (value.rfind("dl16:", 0) == 0 && knownProfile(value.substr(5), setting.profile)) {
    setting.dl16 = true;
  } else if (value != "ieee") {
    setting.error = "TORCH_SPYRE_NUMERICS='" + value + "' is not a valid setting " + kExpected;
  }
  return setting;
}

const NumericsSetting& setting() {
  static const NumericsSetting parsed = parseNumerics();
  TORCH_CHECK_VALUE(parsed.error.empty(), parsed.error);
  return parsed;
}

// What each of the 65 536 bit patterns of a dtype is stored as, and whether a
// finite value became NaN or infinity: one lookup per element written.
struct StoredTable {
  std::array<uint16_t, 65536> bits;
  std::array<uint8_t, 65536> overflows;
};

bool isFinite(c10::ScalarType dtype, uint16_t bits) {
  // float16: exponent 0x7C00; bfloat16: 0x7F80. All ones is infinity or NaN.
  const uint16_t exponent = dtype == c10::kHalf ? 0x7C00 : 0x7F80;
  return (bits & exponent) != exponent;
}

StoredTable* buildTable(c10::ScalarType dtype, dl16::Profile profile) {
  auto* table = new StoredTable;  // lives as long as the process: engines read it to the end
  for (uint32_t in = 0; in < 65536; ++in) {
    const auto out = storedBits(dtype, static_cast<uint16_t>(in), profile);
    table->bits[in] = out;
    table->overflows[in] = isFinite(dtype, static_cast<uint16_t>(in)) && !isFinite(dtype, out);
  }
  return table;
}

StoredTable* half_table = nullptr;
StoredTable* bfloat16_table = nullptr;

std::mutex report_mutex;
std::map<std::string, int64_t>& report() {
  static auto* counts = new std::map<std::string, int64_t>;
  return *counts;
}

}  // namespace

void numerics_detail::resolve() {
  static std::once_flag once;
  const NumericsSetting& chosen = setting();  // raises for a bad value
  std::call_once(once, [&] {
    if (chosen.dl16) {
      half_table = buildTable(c10::kHalf, chosen.profile);
      bfloat16_table = buildTable(c10::kBFloat16, chosen.profile);
    }
    state.store(chosen.dl16 ? kDl16 : kIeee, std::memory_order_release);
  });
}

std::string numericsName() {
  resolveNumerics();
  const NumericsSetting& chosen = setting();
  return chosen.dl16 ? std::string("dl16:") + profileName(chosen.profile) : "ieee";
}

dl16::Profile profileNamed(const std::string& name) {
  dl16::Profile profile = dl16::Profile::Nnp1;
  TORCH_CHECK_VALUE(knownProfile(name, profile), "unknown DLFloat16 profile '", name,
                    "' (expected nnp1 or card-2026-06)");
  return profile;
}

uint16_t storedBits(c10::ScalarType dtype, uint16_t bits, dl16::Profile profile) {
  TORCH_CHECK_VALUE(isDl16Dtype(dtype), "DLFloat16 holds float16 and bfloat16, not ", dtype);
  // Both widen exactly to float; the value read back rounds to nearest even
  // (only float16's 65536, past its largest value, changes: to infinity).
  if (dtype == c10::kHalf) {
    const float value = c10::Half(bits, c10::Half::from_bits());
    return c10::Half(dl16::widen(dl16::encode(value, profile), profile)).x;
  }
  const float value = c10::BFloat16(bits, c10::BFloat16::from_bits());
  return c10::BFloat16(dl16::widen(dl16::encode(value, profile), profile)).x;
}

int64_t roundToDl16(const at::Tensor& t) {
  if (!dl16Writes() || !isDl16Dtype(t.scalar_type()) || t.numel() == 0) return 0;
  const StoredTable& table = t.scalar_type() == c10::kHalf ? *half_table : *bfloat16_table;
  // Op outputs are almost always contiguous: then no dispatch, only the lookups.
  const at::Tensor dense = t.is_contiguous() ? t : t.contiguous();
  auto* data = static_cast<uint16_t*>(dense.data_ptr());
  int64_t overflowed = 0;
  for (int64_t i = 0, n = dense.numel(); i < n; ++i) {
    const uint16_t in = data[i];
    data[i] = table.bits[in];
    overflowed += table.overflows[in];
  }
  if (!dense.is_same(t)) t.copy_(dense);
  return overflowed;
}

at::Scalar roundedFillValue(c10::ScalarType dtype, const at::Scalar& value, bool& overflowed) {
  overflowed = false;
  if (!dl16Writes() || !isDl16Dtype(dtype)) return value;
  const StoredTable& table = dtype == c10::kHalf ? *half_table : *bfloat16_table;
  if (dtype == c10::kHalf) {
    const uint16_t in = value.to<c10::Half>().x;
    overflowed = table.overflows[in] != 0;
    return at::Scalar(c10::Half(table.bits[in], c10::Half::from_bits()));
  }
  const uint16_t in = value.to<c10::BFloat16>().x;
  overflowed = table.overflows[in] != 0;
  return at::Scalar(c10::BFloat16(table.bits[in], c10::BFloat16::from_bits()));
}

void recordOverflow(const std::string& op, int64_t count) {
  const std::lock_guard<std::mutex> lock(report_mutex);
  report()[op] += count;
}

std::vector<std::pair<std::string, int64_t>> overflowReport() {
  const std::lock_guard<std::mutex> lock(report_mutex);
  return {report().begin(), report().end()};
}

void resetOverflowReport() {
  const std::lock_guard<std::mutex> lock(report_mutex);
  report().clear();
}

}  // namespace spyre
