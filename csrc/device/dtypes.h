// The dtypes a spyre tensor may have: those the device can allocate and
// convert to and from every other listed dtype (CPU's copy kernels, which the
// emulated device runs). torch.accelerator.get_device_capability() reports
// exactly these; allocating another dtype raises a TypeError naming it. Under
// the card's rules (device/card_rules.h) only the card's dtypes remain: the
// capability lists those, and allocating another raises a RuntimeError.
#pragma once

#include <c10/core/DeviceCapability.h>
#include <c10/core/ScalarType.h>

namespace spyre {

bool isSupportedDtype(c10::ScalarType dtype);
// Raises TypeError "spyre does not support dtype ..." for an unsupported dtype,
// and under the card's rules RuntimeError for one the card does not hold.
void checkSupportedDtype(c10::ScalarType dtype);
c10::DeviceCapability deviceCapability();

}  // namespace spyre
