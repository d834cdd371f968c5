#include "runtime/error.h"

#include "runtime/runtime.h"

namespace spyre {

const char* SpyreStreamGetErrorString(SpyreStreamError error) noexcept {
  switch (error) {
    case SpyreStreamError::Success:
      return "Success";
    case SpyreStreamError::Shutdown:
      return "Shutdown";
  }
  return "Unknown";
}

SpyreStreamError SpyreStreamGetError(const SpyreStream& stream) {
  return stream.getError();
}

SpyreDeviceState SpyreGetDeviceState() noexcept {
  // GlobalRuntime::get() is an atomic load: never starts the runtime.
  flex::RuntimeContext* context = GlobalRuntime::get();
  if (context == nullptr) {
    return SpyreDeviceState::NotInitialized;
  }
  return context->hasStreamError() ? SpyreDeviceState::StreamError : SpyreDeviceState::Ok;
}

}  // namespace spyre
