// torch.Event on spyre: the native event behind a c10::Event is a
// flex::RuntimeEvent, created on the first record and owned by the c10::Event
// (destroyEvent). The guard (device/guard.cpp) forwards its event methods here.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

namespace spyre {

// `device_index` is the event's index: -1 on the first record, so the stream's
// device is the one that counts. An event whose record throws stays unrecorded.
void recordEvent(void** event, const c10::Stream& stream, c10::DeviceIndex device_index,
                 c10::EventFlag flag);
// Later work on `stream` waits for the event's last record (no host wait).
void blockStreamOnEvent(void* event, const c10::Stream& stream);
bool queryEvent(void* event);
// A host wait (runtime/host_wait.h).
void synchronizeEvent(void* event);
// Safe while a record or wait is pending: the runtime keeps each record's
// completion state alive until the operations that use it have run.
void destroyEvent(void* event) noexcept;
// Milliseconds of device time between two recorded, completed timing events.
double eventElapsedTime(void* start, void* end);

}  // namespace spyre
