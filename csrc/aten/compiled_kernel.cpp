#include "aten/compiled_kernel.h"

#include <cstring>
#include <optional>
#include <vector>

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include "launch/engine_team.h"
#include "launch/sanitizer_accesses.h"
#include "launch/stream_uses.h"
#include "device/numerics.h"
#include "flex/flex.hpp"

namespace spyre {
namespace {
bool isPointer(char kind) { return kind == 'p' || kind == 'r'; }
}  // namespace

CompiledKernel::CompiledKernel(uintptr_t entry, std::string kinds, std::string name)
    : entry_(reinterpret_cast<Entry>(entry)), kinds_(std::move(kinds)), name_(std::move(name)) {
  TORCH_CHECK_VALUE(entry_ != nullptr, "compiled kernel ", name_, ": null entry point");
  for (const char kind : kinds_) {
    TORCH_CHECK_VALUE(kind == 'p' || kind == 'r' || kind == 'i' || kind == 'f' || kind == 'd',
                      "compiled kernel ", name_, ": argument kind '", kind,
                      "' is not one of p (pointer), r (read-only pointer), i (int64), f (float),"
                      " d (double)");
  }
}

void CompiledKernel::setTensor(Arguments& args, size_t index, const at::Tensor& t,
                               const SpyreStream& stream) const {
  TORCH_INTERNAL_ASSERT(index < args.slots.size() && isPointer(kinds_[index]));
  if (t.is_cpu() && t.dim() == 0) {
    std::array<char, 16> value{};
    TORCH_INTERNAL_ASSERT(t.element_size() <= static_cast<int64_t>(value.size()));
    std::memcpy(value.data(), t.const_data_ptr(), t.element_size());
    args.scalars.emplace_back(index, value);
    return;
  }
  TORCH_CHECK_VALUE(t.device() == stream.device(), "compiled kernel ", name_, ": argument ",
                    index, " is on ", t.device(), ", expected ", stream.device(),
                    " (or a 0-dim CPU tensor)");
  recordUse(t, stream);
  if (sanitizer::accessesWanted()) {
    sanitizer::addTensor(args.accesses, t, /*write=*/kinds_[index] == 'p');
  }
  if (C10_UNLIKELY(dl16Writes()) && kinds_[index] == 'p' && isDl16Dtype(t.scalar_type())) {
    args.dl16_writes.push_back(TensorRef::of(t));
  }
  // The kernel runs on an engine: it reaches the tensor through the executors' view.
  args.slots[index] = reinterpret_cast<uintptr_t>(flex::executorAddress(t.data_ptr()));
  args.bytes += t.nbytes();
}

void CompiledKernel::launch(const SpyreStream& stream, Arguments args) const {
  TORCH_INTERNAL_ASSERT(args.slots.size() == kinds_.size());
  checkEngineTeamSetting();
  const size_t bytes = args.bytes;
  std::optional<std::vector<sanitizer::Access>> accesses;
  if (sanitizer::accessesWanted()) accesses = std::move(args.accesses);
  std::string rounded_op = args.dl16_writes.empty() ? std::string() : name_;
  // The library holding the entry point is never unloaded (ctypes does not
  // dlclose), so queued work may outlive this object.
  auto launch = [&] {
    stream.launchCompute(
        [entry = entry_, args = std::move(args), name = std::move(rounded_op)]() mutable {
          placeEngineTeam(/*may_fork=*/true);  // inductor's kernels fork by their own rules
          for (auto& [index, value] : args.scalars) {
            args.slots[index] = reinterpret_cast<uintptr_t>(value.data());
          }
          c10::SmallVector<void*, 16> params;
          params.reserve(args.slots.size());
          for (uint64_t& slot : args.slots) params.push_back(&slot);
          entry(params.data());
          int64_t overflowed = 0;
          for (const TensorRef& ref : args.dl16_writes) overflowed += roundToDl16(ref.cpuAlias());
          if (overflowed != 0) recordOverflow(name, overflowed);
        },
        name_.c_str(), bytes);
  };
  if (accesses) {
    sanitizer::onLaunch(stream.id(), name_, *accesses, launch);  // checked with the launch
  } else {
    launch();
  }
}

}  // namespace spyre
