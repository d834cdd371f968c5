// The legacy profiler's device hooks (torch::profiler::impl::ProfilerStubs):
// torch.autograd.profiler.profile(use_device="spyre") without Kineto
// (ProfilerState.KINETO_PRIVATEUSE1_FALLBACK) brackets every op with two of
// these records and reports the device time between them, as CUDA's stubs do
// with cudaEvents.
//
// Every hook runs inside profiler callbacks around arbitrary ops: none may
// throw. A record that cannot be made (a stream in error state, a freed
// runtime) leaves the event empty, and an elapsed time involving an empty or
// failed event reads 0 (the op's own error is what the user sees).
#include <memory>

#include <c10/util/ApproximateClock.h>
#include <flex/flex.hpp>
#include <torch/csrc/profiler/stubs/base.h>

#include "runtime/host_wait.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

struct SpyreProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  void record(c10::DeviceIndex* device, ProfilerVoidEventStub* event,
              int64_t* cpu_ns) const override {
    try {
      const SpyreStream stream = getCurrentStream(-1);
      if (device != nullptr) *device = stream.device_index();
      auto native = std::make_shared<flex::RuntimeEvent>(/*enable_timing=*/true);
      if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
      native->record(stream.resolveRuntimeHandle());
      *event = std::move(native);
    } catch (...) {
      if (cpu_ns != nullptr) *cpu_ns = c10::getTime();
      event->reset();
    }
  }

  // Microseconds of device time between the two records.
  float elapsed(const ProfilerVoidEventStub* start,
                const ProfilerVoidEventStub* end) const override {
    if (start == nullptr || end == nullptr || !*start || !*end) return 0.0f;
    const auto* first = static_cast<const flex::RuntimeEvent*>(start->get());
    const auto* last = static_cast<const flex::RuntimeEvent*>(end->get());
    try {
      waitForDevice([&] {
        first->synchronize();
        last->synchronize();
      });
      return static_cast<float>(first->elapsedTime(*last) * 1000.0);
    } catch (...) {
      return 0.0f;
    }
  }

  // Spyre has no annotation ranges on the device (no NVTX counterpart).
  void mark(const char* /*name*/) const override {}
  void rangePush(const char* /*name*/) const override {}
  void rangePop() const override {}

  bool enabled() const override { return true; }

  // One device per process: the bound one.
  void onEachDevice(std::function<void(int)> op) const override {
    int device = 0;
    try {
      device = static_cast<int>(boundDevice());
    } catch (...) {
      return;  // no usable device (a forked child): nothing to visit
    }
    op(device);
  }

  // Waits without consuming: a stream's failure belongs to the program's next
  // synchronize()/query() of it, not to the profiler starting or stopping.
  void synchronize() const override { synchronizeDeviceKeepingFailures(); }
};

const bool registered = [] {
  static SpyreProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

}  // namespace
}  // namespace spyre
