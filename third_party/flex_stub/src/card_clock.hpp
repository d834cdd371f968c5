// The card time model's timeline (FLEX_STUB_TIMING=card; flex/card.hpp,
// docs/timing.md). Every operation is placed when it is launched, on the
// launching thread, under the stream's mutex (so in queue order):
//
//   start = max(the stream's modeled tail, the modeled host time,
//               the moment its resource is free)        end = start + duration
//
// Resources: the compute cores (kernels), the on-card DMA (D2D, fills), the
// host link's two directions (H2D, D2H), the card-to-card link (collectives). A resource runs one operation at a
// time, in launch order; operations on different resources overlap. Event
// records take the stream's tail; waits move the stream's tail to the
// record's time; host waits move the host time to what they waited for.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "flex/card.hpp"
#include "op.hpp"

namespace flex::detail {

// FLEX_STUB_TIMING: false for `host` (or unset), true for `card`; throws otherwise.
bool cardTimingFromEnv();
// The default profile with FLEX_STUB_CARD_HOST_PREP_US (microseconds, >= 0).
card::Profile cardProfileFromEnv();

class CardClock {
 public:
  explicit CardClock(const card::Profile& profile) : profile_(profile) {}

  const card::Profile& profile() const { return profile_; }

  // Sets op.card_start / op.card_end (and a graph's node times, a record's
  // modeled timestamp). Called under the stream's mutex.
  void schedule(uint64_t stream_id, Op& op);

  // Host waits: the host's modeled time becomes at least the stream's tail
  // (everything launched on it so far) or the given modeled time.
  void hostWaitStream(uint64_t stream_id);
  void hostWaitUntil(int64_t modeled_ns);
  int64_t hostNs();

  // Where modeled times are placed on the activity records' clock: set when
  // recording starts, so the device lanes begin where the recording began.
  void anchorActivities(int64_t now_ns);
  int64_t activityOffsetNs() const { return activity_offset_ns_.load(std::memory_order_relaxed); }

  card::Summary summary();
  void reset();
  uint64_t compactions();

 private:
  enum Resource : int { kNone = -1, kCores = 0, kDma, kLinkIn, kLinkOut, kLink, kResources };
  enum Category : int { kCompute, kCopy, kCollective, kOther };
  // Intervals kept before the first merge; after a merge, twice what it kept.
  static constexpr size_t kCompactAt = size_t{1} << 20;

  int64_t durationNs(const Op& op) const;
  static Resource resourceOf(const Op& op);
  // Places one operation that takes time; returns its end.
  std::pair<int64_t, int64_t> placeLocked(uint64_t stream_id, const Op& op, int64_t ready_ns);
  int64_t& tailLocked(uint64_t stream_id);
  void compactLocked();

  const card::Profile profile_;
  std::atomic<int64_t> activity_offset_ns_{0};

  std::mutex mutex_;
  int64_t host_ns_ = 0;
  std::array<int64_t, kResources> free_at_{};
  std::vector<int64_t> tails_;  // by stream id
  std::vector<int64_t> busy_;   // by stream id
  std::array<int64_t, 4> by_category_{};
  std::array<int64_t, card::kWorkClasses> by_class_{};
  // The summary's union of busy time: intervals that end by the modeled host
  // time are folded into settled_ns_ (later work starts no earlier than it);
  // the rest are merged when there are compact_at_ of them.
  std::vector<std::pair<int64_t, int64_t>> intervals_;
  size_t compact_at_ = kCompactAt;
  int64_t settled_ns_ = 0;
  uint64_t compactions_ = 0;
  int64_t first_start_ = -1;
  int64_t last_end_ = 0;
};

}  // namespace flex::detail
