// The Kineto plugin: spyre device activities in torch.profiler
// (ProfilerActivity.PrivateUse1; docs/profiling.md).
//
// A session turns on the runtime's activity records (flex/activity.hpp) while
// the profile records, forwards the correlation id of every CPU op Kineto
// pushes to the runtime (so each launch knows the op that made it), and at the
// end turns every record into Kineto activities, as CUPTI does for CUDA, named
// as the card's stack names them in a torch profile (the dialect IBM's
// aiu-trace-analyzer reads; docs/profiling.md, "IBM's trace analyzer"):
//  - a runtime activity on the launching thread (PRIVATEUSE1_RUNTIME, named
//    after the runtime call: "aiuLaunchScheduleCompute", ...), where the flow
//    arrow starts;
//  - a device activity on its stream's lane (kernel, memcpy, memset or sync),
//    linked to the launching CPU op (which gets its device time) and ending
//    the flow;
//  - for a kernel, an "aiuScheduleWait" runtime activity on the thread that
//    ran it: the runtime waiting for the kernel to complete. It spans the
//    kernel and shares its correlation id, so the analyzer finds every kernel
//    inside its parents.
// record_function ranges also get a span on each lane their device work ran on.
// Work launched before the session started is left out: it belongs to the
// previous window.
//
// torch's wheel is built with Kineto, but its headers expose the plugin
// registry and Kineto's interfaces only under USE_KINETO: defined here, for
// this translation unit alone (no other TU includes Kineto). Kineto's
// activity metadata is formatted with fmt, which libtorch does not export:
// header-only here.
#ifndef USE_KINETO
#define USE_KINETO 1
#endif
#define FMT_HEADER_ONLY 1

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/ApproximateClock.h>
#include <flex/activity.hpp>
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include "runtime/runtime.h"
#include "runtime/stream.h"

namespace spyre {
namespace {

using flex::activity::Kind;
using libkineto::ActivityType;

// The device-side type of a record: what torch counts as device time and how
// the trace viewer colours it.
ActivityType deviceActivityType(Kind kind) {
  switch (kind) {
    case Kind::H2D:
    case Kind::D2H:
    case Kind::D2D: return ActivityType::GPU_MEMCPY;
    case Kind::Fill: return ActivityType::GPU_MEMSET;
    case Kind::EventRecord:
    case Kind::EventWait:
    case Kind::Gate: return ActivityType::CUDA_SYNC;
    // The span of a graph launch: its nodes are the device work (counted once).
    case Kind::Graph: return ActivityType::GPU_USER_ANNOTATION;
    case Kind::Compute:
    case Kind::HostCallback:
    case Kind::Delay: break;
  }
  return ActivityType::CONCURRENT_KERNEL;
}

// A kernel's compute phase, as the card's traces name it: "<kernel> Cmpt Exec".
// A kernel that took no time keeps its plain name: the analyzer divides by the
// duration of every "Cmpt Exec" event. Card timing gives every kernel at least
// 1 ns (flex::card::kMinOperationNs); only a host-timed one can measure 0 ns.
constexpr const char* kComputeSuffix = " Cmpt Exec";

bool isKernel(Kind kind) { return deviceActivityType(kind) == ActivityType::CONCURRENT_KERNEL; }

bool namedAsCompute(const flex::activity::Record& record) {
  return isKernel(record.kind) && record.end_ns > record.start_ns;
}

// Copies and fills carry the card stack's names ("Memcpy (HtoD)"; a copy within
// the device has no card name: "Memcpy (DtoD)" by analogy).
std::string deviceActivityName(const flex::activity::Record& record) {
  switch (record.kind) {
    case Kind::H2D: return "Memcpy (HtoD)";
    case Kind::D2H: return "Memcpy (DtoH)";
    case Kind::D2D: return "Memcpy (DtoD)";
    case Kind::Fill: return "Memset (Device)";
    case Kind::EventRecord: return "Event Record";
    case Kind::EventWait: return "Stream Wait Event";
    case Kind::Gate: return "Gate";
    case Kind::Graph: return "spyre graph replay";
    case Kind::Delay:
    case Kind::Compute:
    case Kind::HostCallback: break;
  }
  const std::string name = record.kind == Kind::Delay ? "delay" : record.name;
  return namedAsCompute(record) ? name + kComputeSuffix : name;
}

// The runtime call that launched a record: the card stack's name where it has
// one (a kernel's launch, a host copy), else flex's API name.
const char* launchName(Kind kind) {
  switch (kind) {
    case Kind::H2D: return "aiuDataTransferHtoD";
    case Kind::D2H: return "aiuDataTransferDtoH";
    case Kind::D2D: return "launchOperationD2D";
    case Kind::Fill: return "fillAsync";
    case Kind::Compute:
    case Kind::HostCallback:
    case Kind::Delay: return "aiuLaunchScheduleCompute";
    case Kind::EventRecord: return "RuntimeEvent::record";
    case Kind::EventWait: return "RuntimeEvent::wait";
    case Kind::Gate: return "Gate::enqueueOn";
    case Kind::Graph: return "launchGraph";
  }
  return "launch";
}

// "spyre:0 stream 3 (low priority)": the lane of a stream of the pool.
std::string laneName(int device, c10::StreamId id) {
  const char* pool = id == kDefaultStreamId            ? "default"
                     : id < kFirstHighPriorityStreamId ? "low priority"
                     : id < kFirstHostComputeStreamId  ? "high priority"
                                                       : "host compute";
  return "spyre:" + std::to_string(device) + " stream " + std::to_string(id) + " (" + pool + ")";
}

class SpyreActivityProfilerSession final : public libkineto::IActivityProfilerSession {
 public:
  // `wanted`: the kinds of activity the profile asked for (all of spyre's for a
  // plain ProfilerActivity.PrivateUse1; a subset for {PrivateUse1: ["CONCURRENT_KERNEL"]}).
  explicit SpyreActivityProfilerSession(std::set<ActivityType> wanted)
      : wanted_(std::move(wanted)) {}

  // A session dropped while recording (a profile torn down without stop())
  // must not leave the runtime recording.
  ~SpyreActivityProfilerSession() override {
    if (status_ == libkineto::TraceStatus::RECORDING) flex::activity::disable();
  }

  void start() override {
    // torch's clock (c10::getTime) minus the runtime's, read back to back.
    const int64_t before = flex::activity::timestampNs();
    const int64_t torch_now = c10::getTime();
    const int64_t after = flex::activity::timestampNs();
    clock_offset_ns_ = torch_now - (before + (after - before) / 2);
    start_ns_ = after;
    flex::activity::enable();
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    flex::activity::disable();
    end_ns_ = flex::activity::timestampNs();
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked_activity, int64_t /*start*/,
                    int64_t /*end*/) override {
    buffer_.span = libkineto::TraceSpan(start_ns_ + clock_offset_ns_, end_ns_ + clock_offset_ns_,
                                        "spyre");
    lanes_.clear();
    std::map<uint64_t, c10::StreamId> pool_ids;  // flex stream id -> pool id
    try {
      for (const auto& [id, flex_id] : mappedRuntimeStreamIds()) pool_ids.emplace(flex_id, id);
    } catch (const std::exception& e) {
      errors_.push_back(e.what());
    }
    const int32_t pid = static_cast<int32_t>(::getpid());
    // record_function ranges on the device lanes: per (range, lane), from its
    // first device work's start to its last one's end.
    std::map<std::pair<uint64_t, int64_t>, std::pair<int64_t, int64_t>> ranges;
    for (const flex::activity::Record& record : flex::activity::flush()) {
      // Launched before this window (unstamped, or stamped by an earlier profile).
      if (record.launch_start_ns == 0 || record.launch_start_ns < start_ns_) continue;
      device_ = record.device;
      const auto pool_id = pool_ids.find(record.stream_id);
      // A flex stream outside the pool (none today) gets a lane past the pool ids.
      const int64_t lane = pool_id != pool_ids.end()
                               ? pool_id->second
                               : kMaxStreamIds + static_cast<int64_t>(record.stream_id);
      const libkineto::ITraceActivity* op =
          linked_activity && record.correlation_id != 0
              ? linked_activity(static_cast<int32_t>(record.correlation_id))
              : nullptr;
      const auto id = static_cast<int32_t>(record.launch_id);
      // A graph's node: no launch of its own (the graph's launch made it); its
      // device activity sits on the lane under the graph's span.
      const bool node = record.graph_launch_id != 0;
      const bool with_launch = !node && wants(ActivityType::PRIVATEUSE1_RUNTIME);
      const bool with_work = wants(deviceActivityType(record.kind));
      // The flow arrow joins the launch to its work: only when both are recorded.
      const bool with_flow = with_launch && with_work;
      if (with_launch) {
        buffer_.emplace_activity(buffer_.span, ActivityType::PRIVATEUSE1_RUNTIME,
                                 launchName(record.kind));
        auto& launch = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
        launch.startTime = record.launch_start_ns + clock_offset_ns_;
        launch.endTime = record.launch_end_ns + clock_offset_ns_;
        launch.id = id;
        launch.device = pid;
        launch.resource = static_cast<int32_t>(record.launch_thread);
        launch.threadId = static_cast<int32_t>(record.launch_thread);
        launch.linked = op;
        if (with_flow) {
          launch.flow.id = static_cast<uint32_t>(record.launch_id);
          launch.flow.type = libkineto::kLinkAsyncCpuGpu;
          launch.flow.start = 1;
        }
        launch.addMetadata("correlation", record.launch_id);
        logger.handleActivity(launch);
      }
      const int64_t work_start = record.start_ns + clock_offset_ns_;
      const int64_t work_end = record.end_ns + clock_offset_ns_;
      // A record_function range's span on this lane covers its work, drawn or not.
      const bool in_range =
          record.user_correlation_id != 0 && wants(ActivityType::GPU_USER_ANNOTATION);
      if (in_range) {
        auto [span, inserted] =
            ranges.try_emplace({record.user_correlation_id, lane}, work_start, work_end);
        if (!inserted) {
          span->second.first = std::min(span->second.first, work_start);
          span->second.second = std::max(span->second.second, work_end);
        }
      }
      if (!with_work && !in_range) continue;
      lanes_.emplace(lane, pool_id != pool_ids.end()
                               ? laneName(record.device, pool_id->second)
                               : "spyre:" + std::to_string(record.device) + " flex stream " +
                                     std::to_string(record.stream_id));
      if (!with_work) continue;

      buffer_.emplace_activity(buffer_.span, deviceActivityType(record.kind),
                               deviceActivityName(record));
      auto& work = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
      work.startTime = work_start;
      work.endTime = work_end;
      work.id = id;
      work.device = record.device;
      work.resource = static_cast<int32_t>(lane);
      work.threadId = static_cast<int32_t>(lane);
      // The graph's span is not device time (its nodes are): not linked.
      work.linked = record.kind == Kind::Graph ? nullptr : op;
      if (with_flow) {
        work.flow.id = static_cast<uint32_t>(record.launch_id);
        work.flow.type = libkineto::kLinkAsyncCpuGpu;
        work.flow.start = 0;
      }
      if (record.kind == Kind::Graph) {
        // A span, as record_function's: no args, so the analyzer does not take
        // it for device work overlapping its own nodes (an id would make Kineto
        // write the replay op's "External id").
        work.id = 0;
        logger.handleActivity(work);
        continue;
      }
      work.addMetadata("device", record.device);
      work.addMetadata("stream", lane);
      work.addMetadata("correlation", record.launch_id);
      work.addMetadataQuoted("kind", flex::activity::kindName(record.kind));
      work.addMetadata("bytes", record.bytes);
      if (node) work.addMetadata("graph_launch", record.graph_launch_id);
      if (record.failed) work.addMetadata("failed", "true");
      if (namedAsCompute(record)) addCycleCounters(work, record);
      logger.handleActivity(work);
      if (isKernel(record.kind) && wants(ActivityType::PRIVATEUSE1_RUNTIME)) {
        buffer_.emplace_activity(buffer_.span, ActivityType::PRIVATEUSE1_RUNTIME,
                                 "aiuScheduleWait");
        auto& wait = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
        wait.startTime = work_start;
        wait.endTime = work_end;
        wait.id = id;
        wait.device = pid;
        wait.resource = static_cast<int32_t>(record.run_thread);
        wait.threadId = static_cast<int32_t>(record.run_thread);
        // Not linked to the op: torch would count the wait as the op's CPU time
        // (it runs while the op's thread has moved on).
        wait.addMetadata("correlation", record.launch_id);
        logger.handleActivity(wait);
      }

    }
    for (const auto& [key, span] : ranges) {
      const libkineto::ITraceActivity* range =
          linked_activity ? linked_activity(static_cast<int32_t>(key.first)) : nullptr;
      if (range == nullptr) continue;  // the range began before this window
      buffer_.emplace_activity(buffer_.span, ActivityType::GPU_USER_ANNOTATION, range->name());
      auto& annotation = libkineto::CpuTraceBuffer::toRef(buffer_.activities.back());
      annotation.startTime = span.first;
      annotation.endTime = span.second;
      annotation.device = device_;
      annotation.resource = static_cast<int32_t>(key.second);
      annotation.threadId = static_cast<int32_t>(key.second);
      // Not linked to the host range: torch would add the span to the range's
      // device time on top of the ops' own (the work is counted once, by its ops).
      logger.handleActivity(annotation);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    const std::string name = "spyre:" + std::to_string(device_);
    return std::unique_ptr<libkineto::DeviceInfo>(
        new libkineto::DeviceInfo{device_, device_, name, name});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [lane, name] : lanes_) {
      infos.push_back(libkineto::ResourceInfo{lane, lane, device_, name});
    }
    return infos;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::make_unique<libkineto::CpuTraceBuffer>(std::move(buffer_));
  }

  void pushCorrelationId(uint64_t id) override { flex::activity::pushCorrelationId(id); }
  void popCorrelationId() override { flex::activity::popCorrelationId(); }
  // record_function ranges (torch pushes their ids apart from ops').
  void pushUserCorrelationId(uint64_t id) override { flex::activity::pushUserCorrelationId(id); }
  void popUserCorrelationId() override { flex::activity::popUserCorrelationId(); }

 private:
  bool wants(ActivityType type) const { return wanted_.count(type) != 0; }

  // The card's five cycle counters of a kernel, TS1..TS5 (input DMA, prep,
  // compute start, compute end, output DMA end), as 32-bit counters ticking
  // once per nanosecond from this profile's start (the analyzer's default
  // clock, --freq=1000 MHz, converts them back to µs exactly). A kernel here
  // has no DMA or prep phase: TS1 = TS2 = TS3 = its start, TS4 = TS5 = its end.
  void addCycleCounters(libkineto::GenericTraceActivity& work,
                        const flex::activity::Record& record) const {
    const auto counter = [this](int64_t ns) {
      return std::to_string(static_cast<uint64_t>(ns - start_ns_) & 0xffffffffu);
    };
    const std::string start = counter(record.start_ns), end = counter(record.end_ns);
    work.addMetadataQuoted("TS1", start);
    work.addMetadataQuoted("TS2", start);
    work.addMetadataQuoted("TS3", start);
    work.addMetadataQuoted("TS4", end);
    work.addMetadataQuoted("TS5", end);
  }

  const std::set<ActivityType> wanted_;
  int64_t clock_offset_ns_ = 0;
  int64_t start_ns_ = 0;  // runtime clock
  int64_t end_ns_ = 0;
  int32_t device_ = 0;
  std::map<int64_t, std::string> lanes_;  // resource id -> lane name
  libkineto::CpuTraceBuffer buffer_;
  std::vector<std::string> errors_;
};

class SpyreActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }

  const std::set<ActivityType>& availableActivities() const override { return activities_; }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activity_types, const libkineto::Config& /*config*/) override {
    std::set<ActivityType> wanted;
    std::set_intersection(activity_types.begin(), activity_types.end(), activities_.begin(),
                          activities_.end(), std::inserter(wanted, wanted.end()));
    if (wanted.empty()) return nullptr;
    // Event records and waits and gates are CUDA_SYNC activities, a kind torch's
    // PrivateUse1 group cannot name in a filter: they come with a profile that
    // records every device kind (no filter), and are left out of a filtered one.
    if (std::includes(wanted.begin(), wanted.end(), kDeviceKinds.begin(), kDeviceKinds.end())) {
      wanted.insert(ActivityType::CUDA_SYNC);
    }
    return std::make_unique<SpyreActivityProfilerSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/, int64_t /*duration_ms*/, const std::set<ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  // What a filter can ask of the device side ({PrivateUse1: [...]}), CUDA_SYNC aside.
  const std::set<ActivityType> kDeviceKinds{ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY,
                                            ActivityType::GPU_MEMSET,
                                            ActivityType::GPU_USER_ANNOTATION};
  const std::string name_{"spyre"};
  const std::set<ActivityType> activities_{
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
      ActivityType::CUDA_SYNC, ActivityType::GPU_USER_ANNOTATION,
      ActivityType::PRIVATEUSE1_RUNTIME};
};

REGISTER_PRIVATEUSE1_PROFILER(SpyreActivityProfiler);

}  // namespace
}  // namespace spyre
