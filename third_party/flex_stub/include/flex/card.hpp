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

// Modeled durations in nanoseconds (rounded to whole ns), as the timeline
// charges them.
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
  int64_t busy_ns = 0;        // all of the above: the time one stream would take
  int64_t union_ns = 0;       // time with at least one operation running
  std::vector<StreamBusy> streams;  // by stream id, streams that ran something
};

// Throw flex::Error unless the context exists and models card time.
Summary summary();
void reset();

}  // namespace flex::card
