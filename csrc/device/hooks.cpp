// at::PrivateUse1HooksInterface for spyre: availability, primary context,
// generators, pinned memory and storage resize. Registered once when _C loads.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include "device/allocator.h"
#include "device/generator.h"
#include "runtime/runtime.h"

namespace spyre {
namespace {

struct SpyreHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }

  bool isAvailable() const override {
    return deviceCountNoThrow() > 0;
  }

  // Autograd asks this for every device index; only the bound device has a
  // context, and asking must not start the runtime.
  bool hasPrimaryContext(c10::DeviceIndex device_index) const override {
    return isRuntimeStarted() && device_index == detail::bound_device.load();
  }

  void init() const override {
    boundDevice();
  }

  c10::DeviceIndex deviceCount() const override {
    return deviceCountNoThrow();
  }

  void setCurrentDevice(c10::DeviceIndex device) const override {
    spyre::setCurrentDevice(device);
  }

  c10::DeviceIndex getCurrentDevice() const override {
    return currentDevice();
  }

  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex previous = currentDevice();
    if (device != previous) {
      spyre::setCurrentDevice(device);
    }
    return previous;
  }

  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override {
    return exchangeDevice(device);
  }

  const at::Generator& getDefaultGenerator(c10::DeviceIndex device_index) const override {
    return defaultGenerator(device_index);
  }

  at::Generator getNewGenerator(c10::DeviceIndex device_index) const override {
    return newGenerator(device_index);
  }

  c10::Device getDeviceFromPtr(void* data) const override {
    return deviceFromPtr(data);
  }

  bool isPinnedPtr(const void* data) const override {
    return spyre::isPinnedPtr(data);
  }

  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinnedHostAllocator();
  }

  // untyped_storage().resize_(n): stream ordered, see resizeStorageBytes.
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t new_bytes) const override {
    resizeStorageBytes(storage, new_bytes);
  }
};

const bool registered = [] {
  at::RegisterPrivateUse1HooksInterface(new SpyreHooks());  // leaked on purpose
  return true;
}();

}  // namespace
}  // namespace spyre
