// The card time model: what the work queued on a device would take on a Spyre
// card (docs/timing.md).
//
// With FLEX_STUB_TIMING=card (read when the context is created; default
// `host`) every queued operation gets a modeled start and end when it is
// launched, from the profile below and the order the host imposes (streams,
// event waits, host waits). Execution is unchanged; what changes is the time
// the runtime reports: event timestamps (RuntimeEvent::elapsedTime), the
// Chrome trace and the activity records. The modeled times depend only on
// the launches and waits, never on the host's speed.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flex/flex.hpp"

namespace flex::card {

// The card's constants. Every figure is public (docs/timing.md names the
// source); none was measured on hardware by this project.
struct Profile {
  int cores = 32;                             // AI cores per card
  double matmul_mac_per_ns_per_core = 1140;   // sustained matmul rate (upstream cost model)
  double memory_gb_per_s = 150;               // one-way device memory rate (1 GB/s = 1 B/ns)
  double rw_turnaround_ns_per_byte = 0.00574; // mixed read/write penalty, per min(R, W) byte
  double broadcast_gb_per_s = 118;            // kernels with a broadcast operand
  // Row reductions read at min(memory, floor + boost * exp(-rows / rows_scale)).
  double reduction_floor_gb_per_s = 114;
  double reduction_boost_gb_per_s = 61;
  double reduction_rows_scale = 3700;
  // Matmul classes (upstream's CostParams, docs/timing.md): a batched matmul
  // whose batch is at least bmm_min_batch (on at least bmm_min_cores cores)
  // runs at the slow rate of the compiler's default tile order; a projection
  // (a batched operand times one shared matrix) at one of two rates by batch.
  double bmm_mac_per_ns_per_core = 160;
  int bmm_min_batch = 4;
  int bmm_min_cores = 8;
  double projection_mac_per_ns_per_core = 705;       // batch <= projection_batch_knee
  double projection_wide_mac_per_ns_per_core = 470;  // batch > projection_batch_knee
  int projection_batch_knee = 4;
  // Array fill: min(1, (rows per core / pt_full_rows) ^ pt_exponent).
  double pt_full_rows = 64;
  double pt_exponent = 0.35;
  // Tile spill: the operands re-read by min(cap, slope log2(tile area / area)).
  double spill_area = 65536;
  double spill_slope = 0.45;
  double spill_cap = 1.5;
  // Split re-read of a large tile split many ways along its long or short side.
  double split_area = 131072;
  double split_long_us_per_elem = 2.62e-3;
  double split_short_us_per_elem = 2.88e-3;
  double split_long_knee = 8;
  double split_short_knee = 16;
  // Stick-plane transports: clamp(a - b log2(cols / 64) - d log2(rows), floor,
  // memory); transpose_outer loses m_penalty per halving of its outer dim
  // below m_ref (floor m_floor); restickify and reduce_outer are flat rates.
  double cat0_a = 144, cat0_b = 9.6, cat0_d = 2.4, cat0_floor = 44;
  double cat1_a = 110, cat1_b = 0.8, cat1_d = 0, cat1_floor = 90;
  double transpose_outer_a = 140, transpose_outer_b = 6.8, transpose_outer_d = 1.2,
         transpose_outer_floor = 83;
  double transpose_outer_m_ref = 8, transpose_outer_m_penalty = 13,
         transpose_outer_m_floor = 40;
  double restickify_gb_per_s = 116;
  double reduce_outer_gb_per_s = 113;
  double host_link_gb_per_s = 63.015;         // PCIe Gen5 x16, each direction
  double collective_link_gb_per_s = 63.015;   // card to card: over the same PCIe link
  double host_prep_us = 0;                    // host time to prepare one kernel launch
};

// True when this process's context models card time (FLEX_STUB_TIMING=card);
// before a context exists, what the environment asks for. Throws flex::Error
// for a value other than `host` or `card`.
bool enabled();
// The profile in use: the defaults above, with FLEX_STUB_CARD_HOST_PREP_US.
Profile profile();

// The least time an operation that takes card time takes (a kernel, a host
// callback, a delay, a collective, a copy, a fill): no card operation takes
// 0 ns (small kernels measure tens of µs), and IBM's trace analyzer fails on a
// device event of 0 ns (a kernel has no rate; one that starts as the next
// operation does counts as an overlap). 1 ns moves no calibrated figure.
inline constexpr int64_t kMinOperationNs = 1;

// Modeled durations in nanoseconds (rounded to whole ns, at least
// kMinOperationNs, at most INT64_MAX), as the timeline charges them.
int64_t computeNs(const Profile& p, const WorkCost& cost, uint64_t fallback_bytes);
int64_t hostLinkNs(const Profile& p, uint64_t bytes);    // H2D, D2H
int64_t deviceCopyNs(const Profile& p, uint64_t bytes);  // D2D: read + write
int64_t fillNs(const Profile& p, uint64_t bytes);        // write only
// A collective that sends `link_bytes` over each card's link (the caller
// applies the algorithm's factor, e.g. 2 (world - 1) / world of the tensor's
// bytes for a ring all-reduce).
int64_t collectiveNs(const Profile& p, uint64_t link_bytes);

// Puts a collective on `stream`'s modeled timeline: an operation that takes
// collectiveNs(link_bytes) of card time on the collective link and no host
// time (the emulator runs collectives on the host, outside the streams).
// Named `name` in the trace (kind "delay"). Throws flex::Error when the card
// time model is off.
void launchCollective(RuntimeStream* stream, const std::string& name, uint64_t link_bytes);

inline constexpr size_t kWorkClasses = static_cast<size_t>(WorkCost::Class::DataMovement) + 1;

struct StreamBusy {
  uint64_t stream_id = 0;
  int64_t busy_ns = 0;  // the sum of its operations' modeled durations
};

// The modeled timeline since the context was created (or the last reset()).
struct Summary {
  int64_t start_ns = 0;       // first modeled start (0 when nothing ran)
  int64_t end_ns = 0;         // last modeled end
  int64_t compute_ns = 0;     // kernels (and graph compute nodes)
  int64_t copy_ns = 0;        // H2D, D2H, D2D, fills
  int64_t collective_ns = 0;  // collectives
  int64_t other_ns = 0;       // delays
  // compute_ns by the kernels' class (WorkCost::Class as the index).
  std::array<int64_t, kWorkClasses> class_ns{};
  int64_t busy_ns = 0;        // all of the above: the time one stream would take
  int64_t union_ns = 0;       // time with at least one operation running
  std::vector<StreamBusy> streams;  // by stream id, streams that ran something
};

// Throw flex::Error unless the context exists and models card time.
Summary summary();
void reset();

}  // namespace flex::card
