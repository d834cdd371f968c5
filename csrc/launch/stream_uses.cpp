#include "launch/stream_uses.h"

#include "device/allocator.h"
#include "runtime/capture.h"

namespace spyre {

void recordUse(const at::Tensor& t, const SpyreStream& stream) {
  if (t.defined() && t.is_privateuseone() && t.has_storage()) {
    recordStream(t.storage().data_ptr(), stream);
    if (C10_UNLIKELY(capture::anyCapture())) {
      const std::pair<uint64_t, uint64_t> pool = capture::poolOf(stream.id());
      if (pool != std::pair<uint64_t, uint64_t>{0, 0} &&
          !allocatedInGraphPool(t.storage().data_ptr(), pool)) {
        capture::holdInput(stream.id(), t.storage());
      }
    }
  }
}

}  // namespace spyre
