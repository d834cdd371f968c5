// DDP's per-iteration time stats (DistributedDataParallel._get_ddp_logging_data():
// avg_forward_compute_time, ...) for spyre parameters. Without a timer for the
// device type, torch 2.13's DDP logger warns once per rank ("Time stats are
// currently only collected for CPU and CUDA devices"). Host timestamps, as
// torch's CPU timer: the intervals are the host's view of the iteration (work
// queued on the device may still run after them).
#include <torch/csrc/distributed/c10d/reducer_timer.hpp>

namespace spyre {
namespace {

class SpyreDdpTimer final : public c10d::Timer {
 public:
  explicit SpyreDdpTimer(c10::Device /*device*/) {}

  std::optional<int64_t> measureDifference(Event start, Event end) override {
    const std::optional<int64_t> from = getTimestamp(start);
    const std::optional<int64_t> to = getTimestamp(end);
    // An event not recorded this iteration (no backward, no_sync()): no figure.
    if (!from || !to || *to < *from) return std::nullopt;
    return *to - *from;
  }
};

}  // namespace
}  // namespace spyre

namespace c10d {
C10_REGISTER_TYPED_CLASS(TimerRegistry, c10::kPrivateUse1, spyre::SpyreDdpTimer)
}  // namespace c10d
