// c10::impl::DeviceGuardImplInterface for PrivateUse1: what torch.Stream,
// torch.Event, torch.accelerator and device guards call. Registered statically
// when _C is loaded; nothing here starts the runtime until a device is used.
#include <memory>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "device/allocator.h"
#include "device/dtypes.h"
#include "device/events.h"
#include "runtime/capture.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre {
namespace {

void checkSpyre(c10::DeviceType type, const char* what) {
  TORCH_CHECK(type == c10::DeviceType::PrivateUse1, what,
              " expects a spyre (PrivateUse1) device, got device type ", type);
}

struct SpyreGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return c10::DeviceType::PrivateUse1;
  }

  c10::Device exchangeDevice(c10::Device device) const override {
    checkSpyre(device.type(), "exchangeDevice");
    const c10::Device previous = getDevice();
    if (device.index() != previous.index()) {
      setCurrentDevice(device.index());
    }
    return previous;
  }

  c10::Device getDevice() const override {
    return c10::Device(c10::DeviceType::PrivateUse1, currentDevice());
  }

  void setDevice(c10::Device device) const override {
    checkSpyre(device.type(), "setDevice");
    setCurrentDevice(device.index());
  }

  // Restores a device a guard saw as current: no check needed, never throws.
  // (Upstream's is a no-op, so guards never restored the device.)
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    setCurrentDeviceUnchecked(device.index());
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return deviceCountNoThrow();
  }

  c10::Stream getStream(c10::Device device) const override {
    return getCurrentStream(device.index()).unwrap();
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return spyre::getDefaultStream(device.index()).unwrap();
  }

  c10::Stream getStreamFromGlobalPool(c10::Device device, bool isHighPriority) const override {
    return getStreamFromPool(isHighPriority ? kHighPriority : kLowPriority, device.index()).unwrap();
  }

  // torch.Stream(device="spyre") passes index -1: the pool resolves it.
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return getStreamFromPool(priority, device.index()).unwrap();
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return setCurrentStream(SpyreStream(stream)).unwrap();
  }

  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return SpyreStream(stream).resolveRuntimeHandle();
  }

  bool queryStream(const c10::Stream& stream) const override {
    return SpyreStream(stream).query();
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    SpyreStream(stream).synchronize();
  }

  bool isStreamCapturing(const c10::Stream& stream) const override {
    (void)SpyreStream(stream);  // checked: a spyre stream
    return capture::isCapturing(stream.id());
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    spyre::synchronizeDeviceOrThrow(device_index);
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    checkSpyre(device.type(), "getDeviceCapability");
    // Any visible device (the same for all; no runtime needed), as torch.cuda's.
    checkVisibleDevice(device.index() < 0 ? currentDevice() : device.index());
    return deviceCapability();  // device/dtypes.h
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    recordStream(data_ptr, SpyreStream(stream));
  }

  // ------------------------------------------------------------- events
  // device/events.h: flex::RuntimeEvent behind torch.Event.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    recordEvent(event, stream, device_index, flag);
  }

  void block(void* event, const c10::Stream& stream) const override {
    blockStreamOnEvent(event, stream);
  }

  bool queryEvent(void* event) const override {
    return spyre::queryEvent(event);
  }

  void synchronizeEvent(void* event) const override {
    spyre::synchronizeEvent(event);
  }

  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    spyre::destroyEvent(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    return eventElapsedTime(start, end);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace
}  // namespace spyre
