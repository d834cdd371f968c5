// The card time model: the profile, the duration of each kind of operation,
// and the modeled timeline (card_clock.hpp; docs/timing.md).
#include "card_clock.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "completion.hpp"
#include "context_impl.hpp"
#include "env.hpp"
#include "stream_impl.hpp"

namespace flex {
namespace card {
namespace {

int64_t roundNs(double ns) { return static_cast<int64_t>(std::llround(ns)); }

// Device memory time of R bytes read and W written at `bytes_per_ns`, with the
// read/write turnaround charged on their overlap (upstream's cost model).
double memoryNs(const Profile& p, double read, double written, double bytes_per_ns) {
  return (read + written) / bytes_per_ns + p.rw_turnaround_ns_per_byte * std::min(read, written);
}

double reductionBytesPerNs(const Profile& p, uint64_t rows) {
  const double rate = p.reduction_floor_gb_per_s +
                      p.reduction_boost_gb_per_s * std::exp(-static_cast<double>(rows) /
                                                            p.reduction_rows_scale);
  return std::min(p.memory_gb_per_s, rate);
}

}  // namespace

bool enabled() {
  if (const RuntimeContext* context = RuntimeContext::get()) {
    return context->impl()->card_clock != nullptr;
  }
  return detail::cardTimingFromEnv();
}

Profile profile() {
  if (const RuntimeContext* context = RuntimeContext::get()) {
    if (const auto& clock = context->impl()->card_clock) return clock->profile();
  }
  return detail::cardProfileFromEnv();
}

int64_t computeNs(const Profile& p, const WorkCost& cost, uint64_t fallback_bytes) {
  double read = static_cast<double>(cost.bytes_read);
  double written = static_cast<double>(cost.bytes_written);
  if (cost.macs == 0 && read == 0 && written == 0) {
    // Not counted: the output is read once and written once (memory bound).
    read = written = static_cast<double>(fallback_bytes);
  }
  double rate = p.memory_gb_per_s;
  if (cost.access == WorkCost::Access::Broadcast) rate = p.broadcast_gb_per_s;
  if (cost.access == WorkCost::Access::Reduction) rate = reductionBytesPerNs(p, cost.rows);
  const double memory = memoryNs(p, read, written, rate);
  const double compute =
      static_cast<double>(cost.macs) / (p.cores * p.matmul_mac_per_ns_per_core);
  return roundNs(std::max(compute, memory));
}

int64_t hostLinkNs(const Profile& p, uint64_t bytes) {
  return roundNs(static_cast<double>(bytes) / p.host_link_gb_per_s);
}

int64_t deviceCopyNs(const Profile& p, uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  return roundNs(memoryNs(p, b, b, p.memory_gb_per_s));
}

int64_t fillNs(const Profile& p, uint64_t bytes) {
  return roundNs(memoryNs(p, 0, static_cast<double>(bytes), p.memory_gb_per_s));
}

int64_t collectiveNs(const Profile& p, uint64_t link_bytes) {
  return roundNs(static_cast<double>(link_bytes) / p.collective_link_gb_per_s);
}

namespace {
detail::CardClock& clockOrThrow(const char* what) {
  const RuntimeContext* context = RuntimeContext::get();
  if (context == nullptr || !context->impl()->card_clock) {
    throw Error(std::string("flex: card::") + what +
                ": the card time model is off (set FLEX_STUB_TIMING=card before the runtime "
                "starts)");
  }
  return *context->impl()->card_clock;
}
}  // namespace

void launchCollective(RuntimeStream* stream, const std::string& name, uint64_t link_bytes) {
  clockOrThrow("launchCollective");
  if (!stream) throw Error("flex: card::launchCollective: stream is null");
  detail::Op op;
  op.kind = detail::OpKind::Delay;  // zero host time: the host ran the collective
  op.collective = true;
  op.bytes = link_bytes;
  op.name = name;
  stream->impl()->enqueue(std::move(op));
}

Summary summary() { return clockOrThrow("summary").summary(); }
void reset() { clockOrThrow("reset").reset(); }

}  // namespace card

namespace detail {

bool cardTimingFromEnv() {
  const std::optional<std::string> value = envValue("FLEX_STUB_TIMING");
  if (!value || *value == "host") return false;
  if (*value == "card") return true;
  throw Error("flex: FLEX_STUB_TIMING='" + *value + "' is not a timing model: expected 'host' or "
              "'card'");
}

card::Profile cardProfileFromEnv() {
  card::Profile profile;
  profile.host_prep_us =
      envNonNegativeDouble("FLEX_STUB_CARD_HOST_PREP_US").value_or(profile.host_prep_us);
  return profile;
}

CardClock::Resource CardClock::resourceOf(const Op& op) {
  if (op.collective) return kLink;
  switch (op.kind) {
    case OpKind::Compute: return kCores;
    case OpKind::D2D:
    case OpKind::Fill: return kDma;
    case OpKind::H2D: return kLinkIn;
    case OpKind::D2H: return kLinkOut;
    default: return kNone;
  }
}

int64_t CardClock::durationNs(const Op& op) const {
  switch (op.kind) {
    case OpKind::Compute: return card::computeNs(profile_, op.cost, op.bytes);
    case OpKind::H2D:
    case OpKind::D2H: return card::hostLinkNs(profile_, op.bytes);
    case OpKind::D2D: return card::deviceCopyNs(profile_, op.bytes);
    case OpKind::Fill: return card::fillNs(profile_, op.bytes);
    case OpKind::Delay:
      return op.collective ? card::collectiveNs(profile_, op.bytes) : op.delay.count();
    default: return 0;  // host callbacks, records, waits, gates take no card time
  }
}

int64_t& CardClock::tailLocked(uint64_t stream_id) {
  if (stream_id >= tails_.size()) {
    tails_.resize(stream_id + 1, 0);
    busy_.resize(stream_id + 1, 0);
  }
  return tails_[stream_id];
}

std::pair<int64_t, int64_t> CardClock::placeLocked(uint64_t stream_id, const Op& op,
                                                   int64_t ready_ns) {
  const int64_t duration = durationNs(op);
  const Resource resource = resourceOf(op);
  int64_t start = ready_ns;
  if (resource != kNone) start = std::max(start, free_at_[resource]);
  const int64_t end = start + duration;
  if (resource != kNone) free_at_[resource] = end;
  if (duration > 0) {
    busy_[stream_id] += duration;
    const Category category = op.kind == OpKind::Compute ? kCompute
                              : op.collective              ? kCollective
                              : resource != kNone          ? kCopy
                                                           : kOther;
    by_category_[category] += duration;
    if (first_start_ < 0 || start < first_start_) first_start_ = start;
    last_end_ = std::max(last_end_, end);
    intervals_.emplace_back(start, end);
    if (intervals_.size() >= (size_t{1} << 20)) compactLocked();
  }
  return {start, end};
}

void CardClock::schedule(uint64_t stream_id, Op& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t& tail = tailLocked(stream_id);
  const int64_t prep = std::llround(profile_.host_prep_us * 1e3);
  switch (op.kind) {
    case OpKind::EventRecord:
      op.card_start = op.card_end = std::max(tail, host_ns_);
      op.sync->setModeledNs(op.card_end);
      break;
    case OpKind::EventWait:
      op.card_start = std::max(tail, host_ns_);
      op.card_end = std::max(op.card_start, op.sync->modeledNs());
      break;
    case OpKind::Gate:
      op.card_start = op.card_end = std::max(tail, host_ns_);
      break;
    case OpKind::Graph: {
      host_ns_ += prep;
      int64_t ready = std::max(tail, host_ns_);
      op.card_start = ready;
      op.card_nodes.clear();
      op.card_nodes.reserve(op.graph->ops.size());
      for (const Op& node : op.graph->ops) {
        const auto [start, end] = placeLocked(stream_id, node, ready);
        op.card_nodes.emplace_back(start, end);
        ready = end;
      }
      op.card_end = ready;
      break;
    }
    default: {
      if (op.kind == OpKind::Compute) host_ns_ += prep;
      const auto [start, end] = placeLocked(stream_id, op, std::max(tail, host_ns_));
      op.card_start = start;
      op.card_end = end;
      break;
    }
  }
  tail = op.card_end;
}

void CardClock::hostWaitStream(uint64_t stream_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  host_ns_ = std::max(host_ns_, tailLocked(stream_id));
}

void CardClock::hostWaitUntil(int64_t modeled_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  host_ns_ = std::max(host_ns_, modeled_ns);
}

int64_t CardClock::hostNs() {
  std::lock_guard<std::mutex> lock(mutex_);
  return host_ns_;
}

void CardClock::anchorActivities(int64_t now_ns) {
  activity_offset_ns_.store(now_ns - hostNs(), std::memory_order_relaxed);
}

void CardClock::compactLocked() {
  std::sort(intervals_.begin(), intervals_.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& interval : intervals_) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  intervals_.swap(merged);
}

card::Summary CardClock::summary() {
  std::lock_guard<std::mutex> lock(mutex_);
  compactLocked();
  card::Summary s;
  s.start_ns = std::max<int64_t>(first_start_, 0);
  s.end_ns = last_end_;
  s.compute_ns = by_category_[kCompute];
  s.copy_ns = by_category_[kCopy];
  s.collective_ns = by_category_[kCollective];
  s.other_ns = by_category_[kOther];
  for (int64_t v : by_category_) s.busy_ns += v;
  for (const auto& [start, end] : intervals_) s.union_ns += end - start;
  for (size_t id = 0; id < busy_.size(); ++id) {
    if (busy_[id] > 0) s.streams.push_back({id, busy_[id]});
  }
  return s;
}

void CardClock::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  // The timeline goes on (later work still follows earlier work); only the
  // totals start again.
  std::fill(busy_.begin(), busy_.end(), 0);
  by_category_.fill(0);
  intervals_.clear();
  first_start_ = -1;
  last_end_ = 0;
}

}  // namespace detail
}  // namespace flex
