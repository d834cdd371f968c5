// The card time model: the profile, the duration of each kind of operation,
// and the modeled timeline (card_clock.hpp; docs/timing.md).
#include "card_clock.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "completion.hpp"
#include "context_impl.hpp"
#include "env.hpp"
#include "stream_impl.hpp"

namespace flex {
namespace card {
namespace {

// Whole nanoseconds, saturated: modeled time never wraps (a duration beyond
// INT64_MAX ns, 292 years, is INT64_MAX).
int64_t roundNs(double ns) {
  constexpr double kMax = 9.2233720368547748e18;  // the largest double below 2^63
  if (!(ns > 0)) return 0;
  if (ns >= kMax) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(std::llround(ns));
}

// Device memory time of R bytes read and W written at `bytes_per_ns`, with the
// read/write turnaround charged on their overlap (upstream's cost model).
double memoryNs(const Profile& p, double read, double written, double bytes_per_ns) {
  return (read + written) / bytes_per_ns + p.rw_turnaround_ns_per_byte * std::min(read, written);
}

// Upstream's fitted rates fold the turnaround in: bytes over one rate.
double reductionBytesPerNs(const Profile& p, uint64_t rows) {
  const double rate = p.reduction_floor_gb_per_s +
                      p.reduction_boost_gb_per_s * std::exp(-static_cast<double>(rows) /
                                                            p.reduction_rows_scale);
  return std::min(p.memory_gb_per_s, rate);
}

double transportBytesPerNs(const Profile& p, const WorkCost& cost) {
  using Transport = WorkCost::Transport;
  double a = 0, b = 0, d = 0, floor = 0;
  switch (cost.transport) {
    case Transport::Restickify: return p.restickify_gb_per_s;
    case Transport::ReduceOuter: return p.reduce_outer_gb_per_s;
    case Transport::Cat0: a = p.cat0_a, b = p.cat0_b, d = p.cat0_d, floor = p.cat0_floor; break;
    case Transport::Cat1: a = p.cat1_a, b = p.cat1_b, d = p.cat1_d, floor = p.cat1_floor; break;
    case Transport::TransposeOuter:
      a = p.transpose_outer_a, b = p.transpose_outer_b, d = p.transpose_outer_d;
      floor = p.transpose_outer_floor;
      break;
  }
  if (cost.rows == 0 || cost.cols == 0) return floor;
  const double planes = std::max(1.0, static_cast<double>(cost.cols) / 64.0);
  const double rows = std::max(2.0, static_cast<double>(cost.rows));
  double rate = a - b * std::log2(planes) - d * std::log2(rows);
  rate = std::min(p.memory_gb_per_s, std::max(floor, rate));
  if (cost.transport == Transport::TransposeOuter && cost.outer > 0 &&
      static_cast<double>(cost.outer) < p.transpose_outer_m_ref) {
    rate -= p.transpose_outer_m_penalty *
            std::log2(p.transpose_outer_m_ref / static_cast<double>(cost.outer));
    rate = std::max(p.transpose_outer_m_floor, rate);
  }
  return rate;
}

bool isMatmulClass(WorkCost::Class kind) {
  return kind == WorkCost::Class::Matmul || kind == WorkCost::Class::BatchedMatmul ||
         kind == WorkCost::Class::Projection;
}

// The multiply-add rate of one core for a matmul of this class.
double macRate(const Profile& p, const WorkCost& cost) {
  if (cost.kind == WorkCost::Class::Projection) {
    return cost.batch <= static_cast<uint64_t>(p.projection_batch_knee)
               ? p.projection_mac_per_ns_per_core
               : p.projection_wide_mac_per_ns_per_core;
  }
  if (cost.kind == WorkCost::Class::BatchedMatmul &&
      cost.batch >= static_cast<uint64_t>(p.bmm_min_batch) && p.cores >= p.bmm_min_cores) {
    return p.bmm_mac_per_ns_per_core;
  }
  return p.matmul_mac_per_ns_per_core;
}

// A matmul's time on one split of the cores: b batches side by side, the
// output's rows split m ways and its columns n ways (b m n = cores).
double matmulNs(const Profile& p, const WorkCost& cost, double m, double n) {
  const double rows = static_cast<double>(cost.out_rows) / m;  // per core
  const double cols = static_cast<double>(cost.out_cols) / n;
  const double fill = rows > 0 ? std::min(1.0, std::pow(rows / p.pt_full_rows, p.pt_exponent))
                               : 1.0;
  const double compute =
      static_cast<double>(cost.macs) / p.cores / (macRate(p, cost) * fill);
  const double area = rows * cols;
  const double spill =
      area > 0 ? std::min(p.spill_cap,
                          p.spill_slope * std::log2(std::max(1.0, area / p.spill_area)))
               : 0.0;
  const double read = static_cast<double>(cost.bytes_read);
  const double written = static_cast<double>(cost.bytes_written);
  const double memory = (read + written + static_cast<double>(cost.operand_bytes) * spill) /
                            p.memory_gb_per_s +
                        p.rw_turnaround_ns_per_byte * std::min(read, written);
  // A large tile split many ways re-reads operands beyond the spill; the
  // longer output dim tolerates fewer ways than the shorter.
  const bool rows_longer = static_cast<double>(cost.out_rows) >= static_cast<double>(cost.out_cols);
  const double long_fan = rows_longer ? m : n;
  const double short_fan = rows_longer ? n : m;
  const double excess = std::max(0.0, area - p.split_area);
  const double split_us =
      excess * (p.split_long_us_per_elem *
                    std::max(0.0, std::log2(long_fan / p.split_long_knee)) +
                p.split_short_us_per_elem *
                    std::max(0.0, std::log2(short_fan / p.split_short_knee)));
  return std::max(compute, memory) + split_us * 1e3;
}

// The card's work division of a matmul: the batch first (up to the cores, in
// powers of two), then the split of the output's rows and columns the model
// prices lowest (the fewest row splits among equals).
double matmulClassNs(const Profile& p, const WorkCost& cost) {
  uint64_t batch_split = 1;
  while (batch_split * 2 <= std::min<uint64_t>(cost.batch, static_cast<uint64_t>(p.cores))) {
    batch_split *= 2;
  }
  const uint64_t ways = std::max<uint64_t>(1, static_cast<uint64_t>(p.cores) / batch_split);
  double best = std::numeric_limits<double>::infinity();
  for (uint64_t m = 1; m <= ways; m *= 2) {
    best = std::min(best, matmulNs(p, cost, static_cast<double>(m),
                                   static_cast<double>(ways / m)));
  }
  return best;
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
  if (cost.macs != 0 && isMatmulClass(cost.kind) && cost.out_rows != 0 && cost.out_cols != 0) {
    return std::max(kMinOperationNs, roundNs(matmulClassNs(p, cost)));
  }
  double memory = 0;
  switch (cost.access) {
    case WorkCost::Access::Stream: memory = memoryNs(p, read, written, p.memory_gb_per_s); break;
    case WorkCost::Access::Broadcast: memory = (read + written) / p.broadcast_gb_per_s; break;
    case WorkCost::Access::Reduction:
      memory = (read + written) / reductionBytesPerNs(p, cost.rows);
      break;
    case WorkCost::Access::Transport:
      memory = (read + written) / transportBytesPerNs(p, cost);
      break;
  }
  const double compute =
      static_cast<double>(cost.macs) / (p.cores * macRate(p, cost));
  return std::max(kMinOperationNs, roundNs(std::max(compute, memory)));
}

int64_t hostLinkNs(const Profile& p, uint64_t bytes) {
  return std::max(kMinOperationNs, roundNs(static_cast<double>(bytes) / p.host_link_gb_per_s));
}

int64_t deviceCopyNs(const Profile& p, uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  return std::max(kMinOperationNs, roundNs(memoryNs(p, b, b, p.memory_gb_per_s)));
}

int64_t fillNs(const Profile& p, uint64_t bytes) {
  return std::max(kMinOperationNs,
                  roundNs(memoryNs(p, 0, static_cast<double>(bytes), p.memory_gb_per_s)));
}

int64_t collectiveNs(const Profile& p, uint64_t link_bytes) {
  return std::max(kMinOperationNs,
                  roundNs(static_cast<double>(link_bytes) / p.collective_link_gb_per_s));
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
    case OpKind::HostCallback: return card::kMinOperationNs;
    case OpKind::Delay:
      return op.collective ? card::collectiveNs(profile_, op.bytes)
                           : std::max(card::kMinOperationNs, op.delay.count());
    default: return 0;  // records, waits, gates take no card time
  }
}

int64_t& CardClock::tailLocked(uint64_t stream_id) {
  if (stream_id >= tails_.size()) {
    tails_.resize(stream_id + 1, 0);
    busy_.resize(stream_id + 1, 0);
  }
  return tails_[stream_id];
}

namespace {
// Modeled times saturate at INT64_MAX instead of wrapping.
int64_t addSaturated(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

WorkCost::Class classOf(const Op& op) {
  const WorkCost& cost = op.cost;
  if (cost.macs == 0 && cost.bytes_read == 0 && cost.bytes_written == 0) {
    return WorkCost::Class::Uncounted;
  }
  return cost.kind;
}
}  // namespace

std::pair<int64_t, int64_t> CardClock::placeLocked(uint64_t stream_id, const Op& op,
                                                   int64_t ready_ns) {
  const int64_t duration = durationNs(op);
  const Resource resource = resourceOf(op);
  int64_t start = ready_ns;
  if (resource != kNone) start = std::max(start, free_at_[resource]);
  const int64_t end = addSaturated(start, duration);
  if (resource != kNone) free_at_[resource] = end;
  if (duration > 0) {
    busy_[stream_id] = addSaturated(busy_[stream_id], duration);
    const Category category = op.kind == OpKind::Compute ? kCompute
                              : op.collective              ? kCollective
                              : resource != kNone          ? kCopy
                                                           : kOther;
    by_category_[category] = addSaturated(by_category_[category], duration);
    if (category == kCompute) {
      int64_t& by_class = by_class_[static_cast<size_t>(classOf(op))];
      by_class = addSaturated(by_class, duration);
    }
    if (first_start_ < 0 || start < first_start_) first_start_ = start;
    last_end_ = std::max(last_end_, end);
    intervals_.emplace_back(start, end);
    if (intervals_.size() >= compact_at_) compactLocked();
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
      host_ns_ = addSaturated(host_ns_, prep);
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
      if (op.kind == OpKind::Compute) host_ns_ = addSaturated(host_ns_, prep);
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
  ++compactions_;
  std::sort(intervals_.begin(), intervals_.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& interval : intervals_) {
    if (!merged.empty() && interval.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, interval.second);
    } else {
      merged.push_back(interval);
    }
  }
  // Later work starts no earlier than the host's modeled time: what ends by
  // then is settled. Merged intervals are disjoint, so their lengths add.
  size_t settled = 0;
  while (settled < merged.size() && merged[settled].second <= host_ns_) {
    settled_ns_ = addSaturated(settled_ns_, merged[settled].second - merged[settled].first);
    ++settled;
  }
  merged.erase(merged.begin(), merged.begin() + static_cast<std::ptrdiff_t>(settled));
  intervals_.swap(merged);
  // Twice what is left: each interval is sorted O(1) times on average.
  compact_at_ = std::max(kCompactAt, 2 * intervals_.size());
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
  s.class_ns = by_class_;
  for (int64_t v : by_category_) s.busy_ns = addSaturated(s.busy_ns, v);
  s.union_ns = settled_ns_;
  for (const auto& [start, end] : intervals_) s.union_ns = addSaturated(s.union_ns, end - start);
  for (size_t id = 0; id < busy_.size(); ++id) {
    if (busy_[id] > 0) s.streams.push_back({id, busy_[id]});
  }
  return s;
}

uint64_t CardClock::compactions() {
  std::lock_guard<std::mutex> lock(mutex_);
  return compactions_;
}

void CardClock::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  // The timeline goes on (later work still follows earlier work); only the
  // totals start again.
  std::fill(busy_.begin(), busy_.end(), 0);
  by_category_.fill(0);
  by_class_.fill(0);
  intervals_.clear();
  compact_at_ = kCompactAt;
  settled_ns_ = 0;
  first_start_ = -1;
  last_end_ = 0;
}

}  // namespace detail
}  // namespace flex
