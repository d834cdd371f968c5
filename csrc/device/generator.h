// Random number generators for spyre devices.
//
// A spyre generator owns a CPU generator (mt19937 + Philox state as on CPU):
// spyre's random kernels run the CPU kernel with it on the device timeline, so
// torch.manual_seed(s) makes spyre results reproducible and
// get_rng_state/set_rng_state round-trip the same state format as CPU.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Device.h>

namespace spyre {

// The default generator of a device (-1 = current), created on first use.
const at::Generator& defaultGenerator(c10::DeviceIndex device_index = -1);
// A new, independent generator for a device (-1 = current).
at::Generator newGenerator(c10::DeviceIndex device_index = -1);
// The CPU generator behind a spyre generator (nullopt/undefined -> the default
// generator of `device_index`).
at::Generator cpuGeneratorOf(const std::optional<at::Generator>& generator,
                             c10::DeviceIndex device_index);

}  // namespace spyre
