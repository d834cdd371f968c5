#include "runtime/sync_debug.h"

#include <c10/util/Exception.h>

namespace spyre {

namespace detail {

std::atomic<int> sync_debug_mode{0};

void reportImplicitSync(const char* what) {
  // torch.cuda's message, "called a synchronizing CUDA operation", for spyre,
  // with the operation named (a warning's location alone does not say which
  // of the line's ops waited).
  const int mode = sync_debug_mode.load(std::memory_order_relaxed);
  TORCH_CHECK(mode != static_cast<int>(SyncDebugMode::Error),
              "called a synchronizing spyre operation: ", what);
  if (mode == static_cast<int>(SyncDebugMode::Warn)) {
    TORCH_WARN("called a synchronizing spyre operation: ", what);
  }
}

}  // namespace detail

void setSyncDebugMode(int mode) {
  TORCH_CHECK_VALUE(mode >= 0 && mode <= 2, "invalid sync debug mode ", mode,
                    ", expected one of 0 (\"default\"), 1 (\"warn\"), 2 (\"error\")");
  detail::sync_debug_mode.store(mode, std::memory_order_relaxed);
}

int getSyncDebugMode() noexcept {
  return detail::sync_debug_mode.load(std::memory_order_relaxed);
}

}  // namespace spyre
