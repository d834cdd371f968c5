// Activity records (flex/activity.hpp): a buffer of one record per executed
// operation, filled by engines while a profiler has recording enabled.
#include "flex/activity.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <utility>

#include "clock.hpp"
#include "context_impl.hpp"
#include "stream_impl.hpp"
#include "trace.hpp"

namespace flex {
namespace detail::trace {
namespace {

struct ActivityBuffer {
  std::mutex mutex;
  std::vector<activity::Record> records;
};

// Leaked: engines may record while static destructors run.
ActivityBuffer& buffer() {
  static ActivityBuffer* instance = new ActivityBuffer;
  return *instance;
}

std::atomic<uint64_t> g_next_launch_id{1};

// Each enable() starts a generation. A thread's stack from an earlier one is
// stale: a profiler that stopped inside an op never popped what it pushed.
std::atomic<uint64_t> g_generation{1};

struct CorrelationStacks {
  uint64_t generation = 0;
  std::vector<uint64_t> ids[2];  // kDefault, kUser

  std::vector<uint64_t>& current(int kind) {
    const uint64_t now = g_generation.load(std::memory_order_relaxed);
    if (generation != now) {
      ids[0].clear();
      ids[1].clear();
      generation = now;
    }
    return ids[kind];
  }
  uint64_t innermost(int kind) {
    const std::vector<uint64_t>& stack = current(kind);
    return stack.empty() ? 0 : stack.back();
  }
};
constexpr int kDefault = 0;
constexpr int kUser = 1;

thread_local CorrelationStacks t_correlation_ids;

void push(int kind, uint64_t id) { t_correlation_ids.current(kind).push_back(id); }

void pop(int kind) {
  std::vector<uint64_t>& ids = t_correlation_ids.current(kind);
  if (!ids.empty()) ids.pop_back();
}

uint64_t threadId() {
  thread_local const uint64_t id = static_cast<uint64_t>(::syscall(SYS_gettid));
  return id;
}

}  // namespace

void stampLaunch(Op& op, int64_t launch_start_ns) {
  if (!activityEnabled()) return;  // the Chrome trace needs no launch information
  op.launch.id = g_next_launch_id.fetch_add(1, std::memory_order_relaxed);
  op.launch.correlation = t_correlation_ids.innermost(kDefault);
  op.launch.user_correlation = t_correlation_ids.innermost(kUser);
  op.launch.thread = threadId();
  op.launch.start_ns = launch_start_ns;
  op.launch.end_ns = nowNs();
}

void recordActivity(const RuntimeStream::Impl& stream, const Op& op, int64_t start_ns,
                    int64_t end_ns, bool failed) {
  activity::Record record;
  record.kind = static_cast<activity::Kind>(op.kind);
  record.name = op.name.empty() ? opKindName(op.kind) : op.name;
  record.bytes = op.bytes;
  record.start_ns = start_ns;
  record.end_ns = end_ns;
  record.launch_start_ns = op.launch.start_ns;
  record.launch_end_ns = op.launch.end_ns;
  record.launch_thread = op.launch.thread;
  record.run_thread = threadId();  // engines record what they ran
  record.correlation_id = op.launch.correlation;
  record.user_correlation_id = op.launch.user_correlation;
  record.launch_id =
      op.launch.id != 0 ? op.launch.id : g_next_launch_id.fetch_add(1, std::memory_order_relaxed);
  record.device = stream.context->device;
  record.stream_id = stream.id;
  record.priority = stream.priority;
  record.failed = failed;
  record.graph_launch_id = op.launch.graph_launch;
  ActivityBuffer& b = buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  if (!activityEnabled()) return;  // disabled between the caller's check and now
  b.records.push_back(std::move(record));
}

}  // namespace detail::trace

namespace activity {

static_assert(static_cast<int>(Kind::Gate) == static_cast<int>(detail::OpKind::Gate),
              "activity::Kind mirrors the runtime's operation kinds");

const char* kindName(Kind kind) { return detail::opKindName(static_cast<detail::OpKind>(kind)); }

void enable() {
  detail::trace::ActivityBuffer& b = detail::trace::buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  b.records.clear();
  detail::trace::g_generation.fetch_add(1, std::memory_order_relaxed);
  // The modeled device lanes begin where the recording begins.
  if (const RuntimeContext* context = RuntimeContext::get()) {
    if (const auto& clock = context->impl()->card_clock) clock->anchorActivities(detail::nowNs());
  }
  detail::trace::g_consumers.fetch_or(detail::trace::kActivity, std::memory_order_relaxed);
}

void disable() {
  detail::trace::ActivityBuffer& b = detail::trace::buffer();
  std::lock_guard<std::mutex> lock(b.mutex);
  detail::trace::g_consumers.fetch_and(~unsigned{detail::trace::kActivity},
                                       std::memory_order_relaxed);
}

bool enabled() { return detail::trace::activityEnabled(); }

std::vector<Record> flush() {
  detail::trace::ActivityBuffer& b = detail::trace::buffer();
  std::vector<Record> records;
  std::lock_guard<std::mutex> lock(b.mutex);
  records.swap(b.records);
  return records;
}

void pushCorrelationId(uint64_t id) { detail::trace::push(detail::trace::kDefault, id); }
void popCorrelationId() { detail::trace::pop(detail::trace::kDefault); }
void pushUserCorrelationId(uint64_t id) { detail::trace::push(detail::trace::kUser, id); }
void popUserCorrelationId() { detail::trace::pop(detail::trace::kUser); }

int64_t timestampNs() { return detail::nowNs(); }

}  // namespace activity
}  // namespace flex
