// One queued stream operation, with its launch parameters already validated
// and copied.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "completion.hpp"
#include "flex/flex.hpp"
#include "fill_format.hpp"

namespace flex::detail {

enum class OpKind : uint8_t {
  H2D,
  D2H,
  D2D,
  Fill,
  Compute,
  HostCallback,
  Delay,
  EventRecord,
  EventWait,
  Gate,
  Graph,
};

// The trace name of a kind: "h2d", "d2h", ...
const char* opKindName(OpKind kind);

// A byte range inside one live device allocation.
struct DevPiece {
  char* ptr = nullptr;
  size_t size = 0;
};

// The device side of an operation: usually one piece; a composite address whose
// range crosses chunks keeps the further pieces in `rest` (rare, so the common
// case allocates nothing).
struct DevSpan {
  DevPiece first;
  std::vector<DevPiece> rest;

  template <class Fn>
  void forEach(Fn&& fn) const {
    if (first.size) fn(first);
    for (const DevPiece& piece : rest) fn(piece);
  }
};

// Who launched an operation: filled in at enqueue, only while activity
// recording is on (flex/activity.hpp); all zero otherwise.
struct LaunchInfo {
  uint64_t id = 0;           // activity::Record::launch_id
  uint64_t correlation = 0;  // the launching thread's innermost correlation id
  uint64_t user_correlation = 0;  // and its innermost user range
  uint64_t thread = 0;       // OS thread id
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  uint64_t graph_launch = 0;  // a graph's node: the graph launch's id
};

struct Op {
  OpKind kind = OpKind::Compute;
  uint64_t bytes = 0;          // bytes moved or filled: DMA time, trace
  void* host = nullptr;        // H2D source, D2H destination
  DevSpan dev;                 // H2D/D2D destination, D2H source, fill target
  DevSpan dev_src;             // D2D source
  FillElement fill{};          // fill element, already converted to its format
  std::chrono::nanoseconds delay{0};
  std::function<void()> fn;    // compute, host callback, DMA completion callback
  void (*on_discard)(void*) = nullptr;  // a compute's ComputeParams::on_discard
  void* discard_arg = nullptr;
  std::shared_ptr<Completion> sync;  // record, wait, gate
  std::shared_ptr<const RuntimeGraph::Nodes> graph;  // a graph launch's nodes
  std::string name;            // trace label; only copied while tracing
  LaunchInfo launch;
  // The card time model (card_clock.hpp), only with FLEX_STUB_TIMING=card:
  WorkCost cost;               // a kernel's multiply-adds and bytes
  bool collective = false;     // a Delay that stands for a collective (card::launchCollective)
  int64_t card_start = 0;      // modeled start and end (ns)
  int64_t card_end = 0;
  std::vector<std::pair<int64_t, int64_t>> card_nodes;  // a graph launch's nodes
};

}  // namespace flex::detail

// A graph's nodes, in the order they run (graph.cpp).
struct flex::RuntimeGraph::Nodes {
  std::vector<detail::Op> ops;
};
