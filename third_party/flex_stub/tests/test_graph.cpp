// RuntimeGraph: nodes recorded once, launched as one stream operation.
#include <atomic>
#include <cstring>
#include <vector>

#include "flex/activity.hpp"
#include "util.hpp"

using flex::CompositeAddress;
using flex::ComputeParams;
using flex::D2DParams;
using flex::DataFormats;
using flex::DmaParams;
using flex::RuntimeGraph;
using flex::RuntimeStream;
using flex::test::Gate;

namespace {

ComputeParams compute(std::function<void()> fn, const char* name) {
  ComputeParams params;
  params.fn = std::move(fn);
  params.name = name;
  return params;
}

}  // namespace

TEST(graph_launch_runs_every_node_in_order_each_time) {
  auto* context = util::context();
  RuntimeStream* stream = context->createStream();
  auto* dev = static_cast<float*>(context->allocate(4 * sizeof(float)));
  auto* copy = static_cast<float*>(context->allocate(4 * sizeof(float)));
  RuntimeGraph graph;
  CompositeAddress address(dev, 4 * sizeof(float));
  graph.addFill(&address, 1.0, DataFormats::FP32);
  // Kernels reach device memory through the executors' view.
  auto* dev_view = static_cast<float*>(flex::executorAddress(dev));
  auto* copy_view = static_cast<float*>(flex::executorAddress(copy));
  const ComputeParams twice =
      compute([dev_view] { for (int i = 0; i < 4; ++i) dev_view[i] *= 2; }, "twice");
  graph.addCompute(&twice);
  D2DParams d2d;
  d2d.src = CompositeAddress(dev, 4 * sizeof(float));
  d2d.dst = CompositeAddress(copy, 4 * sizeof(float));
  d2d.size = 4 * sizeof(float);
  graph.addD2D(&d2d);
  std::atomic<int> runs{0};
  const ComputeParams count =
      compute([&runs, copy_view] { runs += static_cast<int>(copy_view[3]); }, "count");
  graph.addCompute(&count);
  CHECK_EQ(graph.nodeCount(), 4u);
  for (int i = 0; i < 3; ++i) stream->launchGraph(graph);
  stream->synchronize();
  CHECK_EQ(runs.load(), 6);
  CHECK_EQ(flex::test::completedOps(stream), 3u);  // one operation per launch
  float first = 0;
  DmaParams back(&first, sizeof first, false, &d2d.dst);
  stream->launchOperationD2H(&back);
  stream->synchronize();
  CHECK_EQ(first, 2.0f);
  context->deallocate(dev);
  context->deallocate(copy);
}

TEST(graph_launch_returns_at_once_and_waits_in_stream_order) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> ran{0};
  RuntimeGraph graph;
  const ComputeParams node = compute([&ran] { ++ran; }, "node");
  graph.addCompute(&node);
  Gate gate;
  gate.enqueueOn(stream);
  stream->launchGraph(graph);
  WAIT_UNTIL(gate.blockedStreams() == 1);
  CHECK_EQ(ran.load(), 0);
  CHECK(!stream->query());
  gate.release();
  stream->synchronize();
  CHECK_EQ(ran.load(), 1);
}

TEST(graph_adds_after_a_launch_change_later_launches_only) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> first{0};
  std::atomic<int> second{0};
  RuntimeGraph graph;
  const ComputeParams a = compute([&first] { ++first; }, "a");
  const ComputeParams b = compute([&second] { ++second; }, "b");
  graph.addCompute(&a);
  Gate gate;
  gate.enqueueOn(stream);
  stream->launchGraph(graph);
  graph.addCompute(&b);
  RuntimeGraph copy = graph;
  stream->launchGraph(copy);
  gate.release();
  stream->synchronize();
  CHECK_EQ(first.load(), 2);
  CHECK_EQ(second.load(), 1);
}

TEST(graph_node_failure_fails_the_stream_naming_the_node_and_skips_the_rest) {
  RuntimeStream* stream = util::context()->createStream();
  std::atomic<int> after{0};
  RuntimeGraph graph;
  const ComputeParams ok = compute([] {}, "ok");
  const ComputeParams bad = compute([] { throw std::runtime_error("boom"); }, "bad");
  const ComputeParams later = compute([&after] { ++after; }, "later");
  graph.addCompute(&ok);
  graph.addCompute(&bad);
  graph.addCompute(&later);
  stream->launchGraph(graph);
  CHECK_THROWS_MSG(stream->synchronize(), "graph node 1 (bad): boom");
  CHECK_EQ(after.load(), 0);
}

TEST(graph_adds_are_checked_as_launches_are) {
  auto* context = util::context();
  RuntimeGraph graph;
  CHECK_THROWS_MSG(graph.addCompute(nullptr), "RuntimeGraph::addCompute: params is null");
  const ComputeParams empty = compute({}, "empty");
  CHECK_THROWS_MSG(graph.addCompute(&empty), "RuntimeGraph::addCompute: 'empty' has no function");
  void* dev = context->allocate(6);
  CompositeAddress address(dev, 6);
  CHECK_THROWS_MSG(graph.addFill(&address, 1.0, DataFormats::FP32),
                   "RuntimeGraph::addFill: 6 bytes is not a whole number of 4-byte elements");
  std::vector<char> host(16);
  D2DParams d2d;
  d2d.src = CompositeAddress(host.data(), 16);
  d2d.dst = CompositeAddress(dev, 6);
  d2d.size = 6;
  CHECK_THROWS_MSG(graph.addD2D(&d2d), "RuntimeGraph::addD2D (src)");
  CHECK_EQ(graph.nodeCount(), 0u);
  context->deallocate(dev);
}

TEST(graph_launch_records_the_launch_and_each_node) {
  RuntimeStream* stream = util::context()->createStream();
  RuntimeGraph graph;
  const ComputeParams a = compute([] {}, "node_a");
  const ComputeParams b = compute([] {}, "node_b");
  graph.addCompute(&a);
  graph.addCompute(&b);
  flex::activity::enable();
  flex::activity::pushCorrelationId(77);
  stream->launchGraph(graph);
  flex::activity::popCorrelationId();
  stream->synchronize();
  flex::activity::disable();
  std::vector<flex::activity::Record> records = flex::activity::flush();
  CHECK_EQ(records.size(), 3u);
  CHECK_EQ(records[0].name, std::string("node_a"));
  CHECK_EQ(records[1].name, std::string("node_b"));
  CHECK_EQ(records[2].name, std::string("graph"));
  CHECK(records[2].kind == flex::activity::Kind::Graph);
  for (const auto& record : records) CHECK_EQ(record.correlation_id, 77u);
  CHECK(records[0].launch_id != records[2].launch_id);
  CHECK_EQ(records[0].graph_launch_id, records[2].launch_id);
  CHECK_EQ(records[1].graph_launch_id, records[2].launch_id);
  CHECK_EQ(records[2].graph_launch_id, 0u);
  CHECK(records[2].start_ns <= records[0].start_ns);
  CHECK(records[1].end_ns <= records[2].end_ns);
}
