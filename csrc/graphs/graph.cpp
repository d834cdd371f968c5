// torch.accelerator.Graph on spyre (docs/graphs.md): at::GraphImplInterface
// over stream capture (runtime/capture.h) and the runtime's graph
// (flex::RuntimeGraph), with the allocator's private pools
// (device/caching_allocator.h).
//
// capture_begin puts the current stream in a capture and makes its
// allocations come from the graph's pool (an id a graph made, or its own);
// capture_end checks the capture and keeps what it recorded, the storages of
// its external inputs (alive until reset) and each node's accesses; replay
// checks those with the sanitizer, then queues the whole graph on the current
// stream as one runtime operation, after the graph's previous launch, and
// returns at once.
#include <ATen/core/GraphImplInterface.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "device/allocator.h"
#include "graphs/graph.h"
#include "graphs/graph_dot.h"
#include "runtime/capture.h"
#include "runtime/runtime.h"
#include "runtime/sanitizer.h"
#include "runtime/stream.h"

namespace spyre {

namespace {

std::atomic<c10::CaptureId_t> next_pool_id{1};

// An id newGraphPoolId() handed out (every graph's pool is one): the only
// pools a graph may share, as on CUDA.
bool isGraphPoolId(c10::MempoolId_t id) {
  return id.first == 0 && id.second >= 1 &&
         id.second < next_pool_id.load(std::memory_order_relaxed);
}

}  // namespace

c10::MempoolId_t newGraphPoolId() {
  return {0, next_pool_id.fetch_add(1, std::memory_order_relaxed)};
}

namespace {

capture::Mode modeOf(at::GraphCaptureMode mode) {
  switch (mode) {
    case at::GraphCaptureMode::Default:
    case at::GraphCaptureMode::Global: return capture::Mode::Global;
    case at::GraphCaptureMode::ThreadLocal: return capture::Mode::ThreadLocal;
    case at::GraphCaptureMode::Relaxed: return capture::Mode::Relaxed;
  }
  TORCH_CHECK_VALUE(false, "spyre graph: unknown capture mode ", static_cast<int>(mode));
}

class SpyreGraph final : public at::GraphImplInterface {
 public:
  explicit SpyreGraph(const at::GraphImplArgs& args) : keep_graph_(args.keep_graph) {}
  ~SpyreGraph() override {
    clear();
    sanitizer::onEventDestroy(&last_launch_);
  }

  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK(capture_ == nullptr, "spyre graph: capture_begin: this graph is already capturing");
    TORCH_CHECK(!captured(),
                "spyre graph: capture_begin: this graph already holds a capture; call reset() "
                "before capturing again");
    const bool shared = pool.first != 0 || pool.second != 0;
    TORCH_CHECK_VALUE(!shared || isGraphPoolId(pool), "spyre graph: capture_begin: pool (",
                      pool.first, ", ", pool.second,
                      ") was made by no graph: expected another graph's g.pool() or "
                      "torch.spyre.graph_pool_handle() (or None for a pool of its own)");
    const SpyreStream stream = getCurrentStream(-1);
    const capture::Mode capture_mode = modeOf(mode);
    if (pool_held_) {
      releaseGraphPool(pool_);
      pool_held_ = false;
    }
    pool_ = shared ? pool : newGraphPoolId();
    useGraphPool(pool_);
    pool_held_ = true;
    auto started = std::make_unique<capture::Capture>();
    capture::begin(*started, stream.id(), capture_mode, pool_);
    capture_ = std::move(started);
  }

  void capture_end() override {
    TORCH_CHECK(capture_ != nullptr,
                "spyre graph: capture_end: no capture in progress (call capture_begin first)");
    const SpyreStream stream = getCurrentStream(-1);
    TORCH_CHECK(!capture_->active || stream.id() == capture_->origin,
                "spyre graph: capture_end must be called on the stream the capture began on (id=",
                capture_->origin, "); the current stream is id=", stream.id());
    const std::unique_ptr<capture::Capture> ended = std::move(capture_);
    capture::end(*ended);  // raises when invalidated or unjoined: nothing is kept
    graph_ = ended->graph;
    nodes_ = ended->nodes;
    inputs_ = std::move(ended->inputs);
    accesses_.clear();
    for (const capture::Node& node : nodes_) {
      if (!node.op.empty()) accesses_.emplace_back(node.op + " (in a graph replay)", node.accesses);
    }
    if (nodes_.empty()) {
      TORCH_WARN("spyre graph: the captured graph is empty: nothing was launched on the capturing "
                 "stream between capture_begin and capture_end");
    }
    if (!keep_graph_) instantiateGraph();
  }

  void instantiate() override {
    TORCH_CHECK(captured(), "spyre graph: instantiate: nothing was captured");
    TORCH_CHECK(keep_graph_,
                "spyre graph: instantiate() is for graphs made with keep_graph=True (the others "
                "are instantiated by capture_end)");
    instantiateGraph();
  }

  void replay() override {
    TORCH_CHECK(captured(),
                "spyre graph: replay: nothing was captured (capture_begin and capture_end first)");
    if (!executable_) instantiateGraph();
    const SpyreStream stream = getCurrentStream(-1);
    flex::RuntimeStream* handle = stream.resolveRuntimeHandle();
    if (C10_UNLIKELY(capture::anyCapture())) {
      capture::refuseIfCapturing(stream.id(), "replay() of another graph");
    }
    // Each launch runs after this graph's previous one, on whatever stream, as
    // cudaGraphLaunch orders them: the nodes write the same memory. On the
    // previous launch's stream, stream order does it. The wait and the record
    // are not the replay's work in profiles (outside its record function).
    const c10::StreamId previous = last_stream_.load(std::memory_order_relaxed);
    const bool follows = previous >= 0 && previous != stream.id();
    auto launch = [&] {
      const std::lock_guard<std::mutex> lock(launch_mutex_);
      if (last_stream_.load(std::memory_order_relaxed) != stream.id()) last_launch_.wait(handle);
      {
        RECORD_FUNCTION("spyre::graph_replay", c10::ArrayRef<const c10::IValue>{});
        handle->launchGraph(*executable_);
      }
      last_launch_.record(handle);
      last_stream_.store(stream.id(), std::memory_order_relaxed);
    };
    if (sanitizer::enabled()) {
      // Each node's accesses, checked (or ordered, by the hazard tracker) as
      // if it were launched here, with the launch.
      if (follows) sanitizer::onStreamWaitEvent(stream.id(), &last_launch_);
      sanitizer::onLaunchAll(stream.id(), accesses_, launch);
      sanitizer::onEventRecord(&last_launch_, stream.id());
    } else {
      launch();
    }
  }

  void reset() override { clear(); }

  c10::MempoolId_t pool() const override { return pool_; }

  void enable_debug_mode() override { debug_ = true; }

  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_,
                "spyre graph: debug_dump needs debug mode: call enable_debug_mode() before "
                "capturing");
    TORCH_CHECK(captured(), "spyre graph: debug_dump: nothing was captured");
    std::ofstream out(path);
    TORCH_CHECK(out.good(), "spyre graph: debug_dump: cannot open ", path, " for writing");
    out << graphDot(nodes_);
    out.close();
    TORCH_CHECK(!out.fail(), "spyre graph: debug_dump: writing ", path, " failed");
  }

 private:
  // A capture ended well: its graph, or what instantiate() made of it, is held.
  bool captured() const { return graph_.has_value() || executable_.has_value(); }

  void instantiateGraph() {
    executable_ = graph_;
    // Without keep_graph the captured graph is not kept (CUDA's rule); its
    // node list stays for debug_dump in debug mode.
    if (!keep_graph_) graph_.reset();
    if (!debug_) nodes_.clear();
  }

  void clear() noexcept {
    if (capture_ != nullptr) {
      capture::abandon(*capture_);
      capture_.reset();
    }
    graph_.reset();
    executable_.reset();
    nodes_.clear();
    accesses_.clear();
    releaseInputs();
    if (pool_held_) {
      releaseGraphPool(pool_);
      pool_held_ = false;
    }
  }

  // The inputs' blocks are reused only once the last replay (ordered after
  // every earlier one) has finished.
  void releaseInputs() noexcept {
    const c10::StreamId last_stream = last_stream_.load(std::memory_order_relaxed);
    if (last_stream >= 0 && !inputs_.empty()) {
      try {
        const SpyreStream last(detail::makeSpyreStream(boundDevice(), last_stream));
        for (const c10::Storage& input : inputs_) recordStream(input.data_ptr(), last);
      } catch (...) {
        // A torn-down runtime (exit): nothing runs any more.
      }
    }
    inputs_.clear();
  }

  const bool keep_graph_;
  bool debug_ = false;
  std::unique_ptr<capture::Capture> capture_;  // while capturing
  std::optional<flex::RuntimeGraph> graph_;       // what capture recorded
  std::optional<flex::RuntimeGraph> executable_;  // what replay launches
  std::vector<capture::Node> nodes_;              // for debug_dump
  std::vector<c10::Storage> inputs_;  // kept alive for the replays (capture::Capture::inputs)
  // What each node reads and writes, for the sanitizer (capture::Node::accesses).
  std::vector<std::pair<std::string, std::vector<sanitizer::Access>>> accesses_;
  c10::MempoolId_t pool_{0, 0};
  bool pool_held_ = false;
  // The previous launch (replay), which the next one is ordered after.
  std::mutex launch_mutex_;
  flex::RuntimeEvent last_launch_;
  std::atomic<c10::StreamId> last_stream_{-1};
};

}  // namespace
}  // namespace spyre

// The registry's key is c10::DeviceTypeName(PrivateUse1, /*lower_case=*/false)
// once the backend is named "spyre".
namespace at {
REGISTER_GRAPH_IMPL(SPYRE, spyre::SpyreGraph);
}  // namespace at
