#include "device/events.h"

#include <memory>

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <flex/flex.hpp>

#include "runtime/capture.h"
#include "runtime/host_wait.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"

namespace spyre {
namespace {

flex::RuntimeEvent* asEvent(void* event) {
  return static_cast<flex::RuntimeEvent*>(event);
}

}  // namespace

void recordEvent(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                 c10::EventFlag flag) {
  // A CPU op for the profiler: the device's record links to it.
  RECORD_FUNCTION("spyre::record_event", c10::ArrayRef<const c10::IValue>{});
  TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
              "Event device index ", static_cast<int>(device_index),
              " does not match recording stream's device index ",
              static_cast<int>(stream.device_index()));
  TORCH_CHECK(flag == c10::EventFlag::PYTORCH_DEFAULT || flag == c10::EventFlag::BACKEND_DEFAULT,
              "Received unknown event flag ", static_cast<int>(flag));
  flex::RuntimeStream* handle = SpyreStream(stream).resolveRuntimeHandle();
  if (C10_UNLIKELY(capture::anyCapture())) {
    // On a capturing stream the record is part of the capture: nothing is
    // queued (an event not yet created is created unrecorded).
    if (*event == nullptr) {
      auto created = std::make_unique<flex::RuntimeEvent>(
          /*enable_timing=*/flag == c10::EventFlag::BACKEND_DEFAULT);
      if (capture::recordEvent(created.get(), stream.id())) {
        *event = created.release();
        return;
      }
    } else if (capture::recordEvent(*event, stream.id())) {
      return;
    }
  }
  if (*event != nullptr) {
    asEvent(*event)->record(handle);
    sanitizer::onEventRecord(*event, stream.id());
    return;
  }
  // Published only once recorded: if the record throws (a stream in error
  // state), torch keeps the event unrecorded, so it must stay null (event_id 0).
  auto created = std::make_unique<flex::RuntimeEvent>(
      /*enable_timing=*/flag == c10::EventFlag::BACKEND_DEFAULT);
  created->record(handle);
  *event = created.release();
  sanitizer::onEventRecord(*event, stream.id());
}

void blockStreamOnEvent(void* event, const c10::Stream& stream) {
  if (event != nullptr) {
    RECORD_FUNCTION("spyre::wait_event", c10::ArrayRef<const c10::IValue>{});
    flex::RuntimeStream* handle = SpyreStream(stream).resolveRuntimeHandle();
    if (C10_UNLIKELY(capture::anyCapture()) && capture::waitEvent(event, stream.id())) return;
    asEvent(event)->wait(handle);
    sanitizer::onStreamWaitEvent(stream.id(), event);
  }
}

bool queryEvent(void* event) {
  if (event == nullptr) return true;
  capture::checkEventHostUse(event, "query()");
  const bool done = asEvent(event)->query();
  if (done) sanitizer::onEventComplete(event);  // the host now knows
  return done;
}

void synchronizeEvent(void* event) {
  if (event != nullptr) {
    capture::checkEventHostUse(event, "synchronize()");
    waitForDevice([event] { asEvent(event)->synchronize(); });
    sanitizer::onEventComplete(event);
  }
}

void destroyEvent(void* event) noexcept {
  capture::forgetEvent(event);
  sanitizer::onEventDestroy(event);
  delete asEvent(event);
}

double eventElapsedTime(void* start, void* end) {
  TORCH_CHECK(start != nullptr && end != nullptr,
              "Both events must be recorded before calculating elapsed time.");
  return asEvent(start)->elapsedTime(*asEvent(end));
}

}  // namespace spyre
