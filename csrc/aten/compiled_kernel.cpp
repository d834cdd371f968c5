#include "aten/compiled_kernel.h"

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include "aten/engine_team.h"

namespace spyre {

CompiledKernel::CompiledKernel(uintptr_t entry, std::string kinds, std::string name)
    : entry_(reinterpret_cast<Entry>(entry)), kinds_(std::move(kinds)), name_(std::move(name)) {
  TORCH_CHECK_VALUE(entry_ != nullptr, "compiled kernel ", name_, ": null entry point");
  for (const char kind : kinds_) {
    TORCH_CHECK_VALUE(kind == 'p' || kind == 'i' || kind == 'f' || kind == 'd',
                      "compiled kernel ", name_, ": argument kind '", kind,
                      "' is not one of p (pointer), i (int64), f (float), d (double)");
  }
}

void CompiledKernel::launch(const SpyreStream& stream, Slots slots, size_t bytes) const {
  TORCH_INTERNAL_ASSERT(slots.size() == kinds_.size());
  checkEngineTeamSetting();
  // The library holding the entry point is never unloaded (ctypes does not
  // dlclose), so queued work may outlive this object.
  stream.launchCompute(
      [entry = entry_, slots = std::move(slots)]() mutable {
        placeEngineTeam();
        c10::SmallVector<void*, 16> params;
        params.reserve(slots.size());
        for (uint64_t& slot : slots) params.push_back(&slot);
        entry(params.data());
      },
      name_.c_str(), bytes);
}

}  // namespace spyre
