#pragma once
// Clean interpreter exit after backward(): see docs/reliability.md, "Autograd
// device threads at exit".
#include <c10/core/Device.h>

namespace spyre {

// Runs an empty backward pass (no device work, tensors that never had a Python
// object) through torch's autograd device thread for spyre:`device`, from a
// fresh C++ thread, and waits for it up to `timeout_seconds`. That thread runs
// one task at a time and drops the previous graph task (and every Python object
// it holds) before it takes the next: once this pass completes, it holds no
// Python reference from the user's backward() calls. Returns whether the pass
// completed in time. Call without the GIL (the device thread may need it).
bool drainAutogradDeviceThread(c10::DeviceIndex device, double timeout_seconds);

}  // namespace spyre
