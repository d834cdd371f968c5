#include "device/dtypes.h"

#include <string>

#include <c10/util/Exception.h>

#include "device/card_rules.h"

namespace spyre {

bool isSupportedDtype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kBool:
    case c10::kByte:
    case c10::kChar:
    case c10::kShort:
    case c10::kInt:
    case c10::kLong:
    case c10::kUInt16:
    case c10::kUInt32:
    case c10::kUInt64:
    case c10::kHalf:
    case c10::kBFloat16:
    case c10::kFloat:
    case c10::kDouble:
    case c10::kComplexHalf:
    case c10::kComplexFloat:
    case c10::kComplexDouble:
    case c10::kFloat8_e5m2:
    case c10::kFloat8_e4m3fn:
    case c10::kFloat8_e5m2fnuz:
    case c10::kFloat8_e4m3fnuz:
    case c10::kFloat8_e8m0fnu:
      return true;
    default:
      return false;
  }
}

void checkSupportedDtype(c10::ScalarType dtype) {
  TORCH_CHECK_TYPE(isSupportedDtype(dtype), "spyre does not support dtype ", dtype,
                   ": spyre tensors hold dtypes the device can convert to and from float32 "
                   "(torch.accelerator.get_device_capability()['supported_dtypes'] lists them)");
  checkCardDtype(dtype, "allocate a tensor of");
}

c10::DeviceCapability deviceCapability() {
  c10::DeviceCapability capability;
  const bool card = cardRules();
#define SPYRE_SET_SUPPORT(_, name) \
  capability.capability_data.supported_scalar_types.has_##name =    \
      isSupportedDtype(c10::ScalarType::name) && (!card || isCardDtype(c10::ScalarType::name));
  AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(SPYRE_SET_SUPPORT)
#undef SPYRE_SET_SUPPORT
  return capability;
}

}  // namespace spyre
