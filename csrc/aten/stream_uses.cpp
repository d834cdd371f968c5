#include "aten/stream_uses.h"

#include "device/allocator.h"

namespace spyre {

void recordUse(const at::Tensor& t, const SpyreStream& stream) {
  if (t.defined() && t.is_privateuseone() && t.has_storage()) {
    recordStream(t.storage().data_ptr(), stream);
  }
}

}  // namespace spyre
