// The card time model (FLEX_STUB_TIMING=card, flex/card.hpp): durations from the
// profile, and a timeline ordered by streams, resources, events and host waits.
#include <chrono>
#include <limits>
#include <vector>

#include "flex/card.hpp"
#include "flex/testing.hpp"
#include "util.hpp"

using flex::CompositeAddress;
using flex::ComputeParams;
using flex::D2DParams;
using flex::DmaParams;
using flex::RuntimeEvent;
using flex::RuntimeStream;
using flex::WorkCost;

namespace {

void d2d(RuntimeStream* stream, void* dst, void* src, size_t bytes) {
  D2DParams params;
  params.src = CompositeAddress(src, bytes);
  params.dst = CompositeAddress(dst, bytes);
  params.size = bytes;
  stream->launchOperationD2D(&params);
}

void matmul(RuntimeStream* stream, uint64_t n) {
  ComputeParams params;
  params.fn = [] {};
  params.cost.macs = n * n * n;
  params.cost.bytes_read = 2 * n * n * 2;
  params.cost.bytes_written = n * n * 2;
  stream->launchOperationCompute(&params);
}

int64_t modeledNs(const RuntimeEvent& start, const RuntimeEvent& end) {
  end.synchronize();
  return static_cast<int64_t>(start.elapsedTime(end) * 1e6 + 0.5);
}

}  // namespace

TEST(card_durations_follow_the_profile) {
  const flex::card::Profile p;
  WorkCost mm;
  mm.macs = uint64_t{2048} * 2048 * 2048;
  mm.bytes_read = 2 * 2048 * 2048 * 2;
  mm.bytes_written = 2048 * 2048 * 2;
  CHECK_EQ(flex::card::computeNs(p, mm, 0), 235470);  // compute bound: MACs / (32 x 1140)
  CHECK_EQ(flex::card::hostLinkNs(p, 64 << 20), 1064967);
  CHECK_EQ(flex::card::deviceCopyNs(p, 64 << 20), 1279990);
  CHECK_EQ(flex::card::fillNs(p, 150), 1);
  WorkCost none;
  CHECK_EQ(flex::card::computeNs(p, none, 150), flex::card::deviceCopyNs(p, 150));  // fallback
  WorkCost rows;
  rows.bytes_read = 150000;
  rows.access = WorkCost::Access::Reduction;
  rows.rows = 1;
  CHECK_EQ(flex::card::computeNs(p, rows, 0), 1000);  // capped at the one-way rate
  CHECK_EQ(flex::card::collectiveNs(p, 63015), 1000);
}

TEST(card_timing_is_off_by_default_and_refuses_other_values) {
  CHECK(!flex::card::enabled());
  util::setEnv("FLEX_STUB_TIMING", "cards");
  CHECK_THROWS_MSG(flex::card::enabled(),
                   "flex: FLEX_STUB_TIMING='cards' is not a timing model: expected 'host' or "
                   "'card'");
  CHECK_THROWS_MSG(flex::RuntimeContext::create(0), "FLEX_STUB_TIMING='cards'");
  util::setEnv("FLEX_STUB_TIMING", "host");
  util::context();
  CHECK(!flex::card::enabled());
  CHECK_THROWS_MSG(flex::card::summary(), "the card time model is off");
}

TEST(card_timeline_overlaps_resources_and_serializes_streams) {
  util::setEnv("FLEX_STUB_TIMING", "card");
  auto* context = util::context();
  CHECK(flex::card::enabled());
  const flex::card::Profile p = flex::card::profile();
  const size_t bytes = 1 << 20;
  void* a = context->allocate(bytes);
  void* b = context->allocate(bytes);
  RuntimeStream* main = context->getDefaultStream();
  RuntimeStream* s1 = context->createStream();
  RuntimeStream* s2 = context->createStream();
  WorkCost mm;
  mm.macs = uint64_t{512} * 512 * 512;
  mm.bytes_read = 2 * 512 * 512 * 2;
  mm.bytes_written = 512 * 512 * 2;
  const int64_t copy_ns = flex::card::deviceCopyNs(p, bytes);
  const int64_t mm_ns = flex::card::computeNs(p, mm, 0);

  // Two streams, a copy and a matmul: the larger of the two.
  RuntimeEvent start(true), end(true), forked, done1, done2;
  start.record(main);
  start.wait(s1);
  start.wait(s2);
  d2d(s1, b, a, bytes);
  matmul(s2, 512);
  done1.record(s1);
  done2.record(s2);
  done1.wait(main);
  done2.wait(main);
  end.record(main);
  CHECK_EQ(modeledNs(start, end), std::max(copy_ns, mm_ns));

  // One stream: their sum.
  RuntimeEvent start2(true), end2(true);
  start2.record(s1);
  d2d(s1, b, a, bytes);
  matmul(s1, 512);
  end2.record(s1);
  CHECK_EQ(modeledNs(start2, end2), copy_ns + mm_ns);

  // A host wait orders a later launch on another stream after it.
  RuntimeEvent start3(true), end3(true);
  start3.record(s1);
  matmul(s1, 512);
  s1->synchronize();
  d2d(s2, b, a, bytes);
  end3.record(s2);
  CHECK_EQ(modeledNs(start3, end3), mm_ns + copy_ns);

  const flex::card::Summary summary = flex::card::summary();
  CHECK_EQ(summary.compute_ns, 3 * mm_ns);
  CHECK_EQ(summary.copy_ns, 3 * copy_ns);
  CHECK_EQ(summary.busy_ns - summary.union_ns, std::min(copy_ns, mm_ns));
  context->deallocate(a);
  context->deallocate(b);
}

// Every operation that takes card time takes at least 1 ns: IBM's trace
// analyzer fails on a device event of 0 ns, and no card operation takes 0 ns.
TEST(card_operations_take_at_least_one_nanosecond) {
  const flex::card::Profile p;
  WorkCost none;
  CHECK_EQ(flex::card::computeNs(p, none, 0), flex::card::kMinOperationNs);
  WorkCost few;
  few.bytes_read = few.bytes_written = 4;  // 8 bytes at 150 GB/s: 0.05 ns
  CHECK_EQ(flex::card::computeNs(p, few, 0), 1);
  CHECK_EQ(flex::card::hostLinkNs(p, 4), 1);
  CHECK_EQ(flex::card::deviceCopyNs(p, 0), 1);
  CHECK_EQ(flex::card::fillNs(p, 4), 1);
  CHECK_EQ(flex::card::collectiveNs(p, 0), 1);

  util::setEnv("FLEX_STUB_TIMING", "card");
  auto* context = util::context();
  void* a = context->allocate(8);
  RuntimeStream* stream = context->getDefaultStream();
  RuntimeEvent start(true), end(true);
  start.record(stream);
  ComputeParams params;
  params.fn = [] {};
  params.cost = few;
  stream->launchOperationCompute(&params);
  util::callback(stream, [] {});
  stream->launchOperationDelay(std::chrono::nanoseconds(0));
  d2d(stream, static_cast<char*>(a) + 4, a, 4);
  end.record(stream);
  CHECK_EQ(modeledNs(start, end), 4);
  const flex::card::Summary summary = flex::card::summary();
  CHECK_EQ(summary.compute_ns, 1);
  CHECK_EQ(summary.copy_ns, 1);
  CHECK_EQ(summary.busy_ns, 4);
  context->deallocate(a);
}

namespace {
WorkCost matmulCost(WorkCost::Class kind, uint64_t batch, uint64_t m, uint64_t n, uint64_t k,
                    bool shared_right) {
  WorkCost cost;
  cost.kind = kind;
  cost.batch = batch;
  cost.out_rows = m;
  cost.out_cols = n;
  cost.macs = batch * m * n * k;
  cost.operand_bytes = batch * m * k * 2 + (shared_right ? 1 : batch) * k * n * 2;
  cost.bytes_read = cost.operand_bytes;
  cost.bytes_written = batch * m * n * 2;
  return cost;
}

WorkCost transportCost(WorkCost::Transport transport, uint64_t read, uint64_t written,
                       uint64_t rows, uint64_t cols) {
  WorkCost cost;
  cost.kind = WorkCost::Class::DataMovement;
  cost.access = WorkCost::Access::Transport;
  cost.transport = transport;
  cost.bytes_read = read;
  cost.bytes_written = written;
  cost.rows = rows;
  cost.cols = cols;
  return cost;
}
}  // namespace

// Each class's duration equals upstream's cost model (a3128985) on the same
// kernel, float16 on 32 cores (docs/timing.md, "Validation"), in whole ns.
TEST(card_classes_follow_upstreams_cost_model) {
  const flex::card::Profile p;
  using Class = WorkCost::Class;
  using Transport = WorkCost::Transport;
  // 2-D: the spill re-read of a 2048 x 64 tile makes it memory bound.
  CHECK_EQ(flex::card::computeNs(p, matmulCost(Class::Matmul, 1, 2048, 2048, 2048, false), 0),
           266254);
  // Batched, default tile order: 160 MAC/ns/core from batch 4.
  CHECK_EQ(flex::card::computeNs(p, matmulCost(Class::BatchedMatmul, 16, 512, 512, 64, false), 0),
           88234);
  CHECK_EQ(flex::card::computeNs(p, matmulCost(Class::BatchedMatmul, 4, 1024, 1024, 512, false),
                                 0),
           419430);
  // Projections: 705 MAC/ns/core up to batch 4, 470 above.
  CHECK_EQ(flex::card::computeNs(p, matmulCost(Class::Projection, 2, 1024, 1024, 1024, true), 0),
           95190);
  CHECK_EQ(flex::card::computeNs(p, matmulCost(Class::Projection, 8, 512, 768, 768, true), 0),
           160633);
  CHECK_EQ(flex::card::computeNs(
               p, transportCost(Transport::Cat0, 8388608, 8388608, 4096, 1024), 0),
           218453);
  CHECK_EQ(flex::card::computeNs(
               p, transportCost(Transport::Restickify, 4194304, 4194304, 0, 0), 0),
           72316);
  CHECK_EQ(flex::card::computeNs(
               p, transportCost(Transport::ReduceOuter, 16777216, 4096, 0, 0), 0),
           148507);
  WorkCost rows;
  rows.kind = Class::Reduction;
  rows.access = WorkCost::Access::Reduction;
  rows.bytes_read = 16777216;
  rows.bytes_written = 8192;
  rows.rows = 4096;
  CHECK_EQ(flex::card::computeNs(p, rows, 0), 125112);
}

TEST(card_durations_saturate_instead_of_overflowing) {
  util::setEnv("FLEX_STUB_TIMING", "card");
  auto* context = util::context();
  RuntimeStream* stream = context->getDefaultStream();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  RuntimeEvent start(true), end(true);
  start.record(stream);
  // Two delays whose sum passes INT64_MAX (the runtime stops their sleep at exit).
  stream->launchOperationDelay(std::chrono::nanoseconds(kMax / 2 + 1));
  stream->launchOperationDelay(std::chrono::nanoseconds(kMax / 2 + 1));
  end.record(stream);
  const flex::card::Summary summary = flex::card::summary();
  CHECK_EQ(summary.end_ns, kMax);
  CHECK_EQ(summary.busy_ns, kMax);
  CHECK_EQ(summary.other_ns, kMax);
  CHECK_EQ(summary.union_ns, kMax);
}

// A million launches: the busy intervals are merged when 2^20 have gathered,
// and what ends before the modeled host time is settled, so each launch keeps
// its cost (no merge per launch after the first million).
TEST(card_clock_merges_its_intervals_amortised) {
  util::setEnv("FLEX_STUB_TIMING", "card");
  util::setEnv("FLEX_STUB_CARD_HOST_PREP_US", "1");
  auto* context = util::context();
  RuntimeStream* stream = context->getDefaultStream();
  ComputeParams params;
  params.cost.bytes_read = 1024;
  params.cost.bytes_written = 1024;
  const int64_t each = flex::card::computeNs(flex::card::profile(), params.cost, 0);
  constexpr uint64_t kLaunches = (uint64_t{1} << 20) + 1000;
  for (uint64_t i = 0; i < kLaunches; ++i) {
    params.fn = [] {};
    stream->launchOperationCompute(&params);
  }
  // Merged once, at the 2^20th launch (one interval left: the last, still
  // running at the host's time); the 1000 launches after it do not merge
  // (a merge sorts every interval held: once per 2^20 launches, never per launch).
  CHECK_EQ(flex::test::cardCompactions(), uint64_t{1});
  const flex::card::Summary summary = flex::card::summary();
  CHECK_EQ(flex::test::cardCompactions(), uint64_t{2});
  CHECK_EQ(summary.busy_ns, static_cast<int64_t>(kLaunches) * each);
  CHECK_EQ(summary.union_ns, summary.busy_ns);  // disjoint: 1 us of host prep apart
  CHECK_EQ(summary.end_ns, static_cast<int64_t>(kLaunches) * 1000 + each);
  stream->synchronize();
}
