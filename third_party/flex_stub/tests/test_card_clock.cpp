// The card time model (FLEX_STUB_TIMING=card, flex/card.hpp): durations from the
// profile, and a timeline ordered by streams, resources, events and host waits.
#include <vector>

#include "flex/card.hpp"
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
