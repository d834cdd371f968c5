// c10::impl::DeviceGuardImplInterface for PrivateUse1: what torch.Stream,
// torch.Event, torch.accelerator and device guards call. Registered statically
// when _C is loaded; nothing here starts the runtime until a device is used.
#include <memory>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "spyre_allocator.h"
#include "spyre_runtime.h"
#include "spyre_stream.h"

namespace spyre {
namespace {

void checkSpyre(c10::DeviceType type, const char* what) {
  TORCH_CHECK(type == c10::DeviceType::PrivateUse1, what,
              " expects a spyre (PrivateUse1) device, got device type ", type);
}

flex::RuntimeEvent* asEvent(void* event) {
  return static_cast<flex::RuntimeEvent*>(event);
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
    return getStreamFromPool(device.index(), isHighPriority ? -1 : 0).unwrap();
  }

  // torch.Stream(device="spyre") passes index -1: the pool resolves it.
  c10::Stream getNewStream(c10::Device device, int priority) const override {
    return getStreamFromPool(device.index(), priority).unwrap();
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

  bool isStreamCapturing(const c10::Stream& /*stream*/) const override {
    return false;
  }

  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    spyre::synchronizeDevice(device_index);
  }

  c10::DeviceCapability getDeviceCapability(c10::Device device) const override {
    checkSpyre(device.type(), "getDeviceCapability");
    // Every op runs (through the CPU fallback at worst), so every dtype is supported.
    return c10::DeviceCapability();
  }

  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    recordStream(data_ptr, SpyreStream(stream));
  }

  // ------------------------------------------------------------- events
  // The native event is a flex::RuntimeEvent, created on the first record.
  // `device_index` is the event's index: -1 on the first record, so the
  // stream's device is the one that counts.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "Event device index ", static_cast<int>(device_index),
                " does not match recording stream's device index ",
                static_cast<int>(stream.device_index()));
    TORCH_CHECK(flag == c10::EventFlag::PYTORCH_DEFAULT || flag == c10::EventFlag::BACKEND_DEFAULT,
                "Received unknown event flag ", static_cast<int>(flag));
    flex::RuntimeStream* handle = SpyreStream(stream).resolveRuntimeHandle();
    if (*event != nullptr) {
      asEvent(*event)->record(handle);
      return;
    }
    // Published only once recorded: if the record throws (a stream in error
    // state), torch keeps the event unrecorded, so it must stay null (event_id 0).
    auto created = std::make_unique<flex::RuntimeEvent>(
        /*enable_timing=*/flag == c10::EventFlag::BACKEND_DEFAULT);
    created->record(handle);
    *event = created.release();
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;
    }
    asEvent(event)->wait(SpyreStream(stream).resolveRuntimeHandle());
  }

  bool queryEvent(void* event) const override {
    return event == nullptr || asEvent(event)->query();
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      try {
        asEvent(event)->synchronize();
      } catch (...) {
        parkIfExiting();
        throw;
      }
      parkIfExiting();  // woken because the process exits: do not return
    }
  }

  // Safe while a record or wait is pending: the runtime keeps each record's
  // completion state alive until the operations that use it have run.
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/) const noexcept override {
    delete asEvent(event);
  }

  double elapsedTime(void* start, void* end, const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "Both events must be recorded before calculating elapsed time.");
    return asEvent(start)->elapsedTime(*asEvent(end));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SpyreGuardImpl);

}  // namespace
}  // namespace spyre
