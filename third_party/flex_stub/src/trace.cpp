// Chrome trace ("traceEvents" JSON, chrome://tracing or Perfetto): one complete
// ("ph":"X") event per executed operation; pid = card, tid = stream id. Copies,
// fills and kernels carry the names the card's own traces give them (the
// dialect IBM's aiu-trace-analyzer reads; docs/flex_stub.md, "Trace").
#include "trace.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "clock.hpp"
#include "context_impl.hpp"
#include "stream_impl.hpp"

namespace flex::detail::trace {

std::atomic<unsigned> g_consumers{0};

namespace {

struct Entry {
  int64_t start_ns;
  int64_t end_ns;
  uint64_t stream_id;
  uint64_t bytes;
  RuntimeStreamPriority priority;
  OpKind kind;
  std::string name;  // empty: the kind's name
};

struct Recorder {
  std::mutex mutex;
  std::vector<Entry> entries;
  int64_t origin_ns = 0;
};

// Leaked: engines may record while static destructors run.
Recorder& recorder() {
  static Recorder* instance = new Recorder;
  return *instance;
}

std::string jsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

bool isKernel(OpKind kind) {
  return kind == OpKind::Compute || kind == OpKind::HostCallback || kind == OpKind::Delay;
}

// A kernel that took time is its compute phase, "<name> Cmpt Exec"; one that took
// none keeps its plain name (the analyzer divides by a "Cmpt Exec" duration).
bool namedAsCompute(const Entry& e) { return isKernel(e.kind) && e.end_ns > e.start_ns; }

std::string cardName(const Entry& e) {
  switch (e.kind) {
    case OpKind::H2D: return "Memcpy (HtoD)";
    case OpKind::D2H: return "Memcpy (DtoH)";
    case OpKind::D2D: return "Memcpy (DtoD)";
    case OpKind::Fill: return "Memset (Device)";
    default: break;
  }
  const std::string name = e.name.empty() ? opKindName(e.kind) : e.name;
  return namedAsCompute(e) ? name + " Cmpt Exec" : name;
}

// The card's cycle counters of a kernel (TS1..TS5), 32-bit, one tick per ns from
// the trace's origin: TS1 = TS2 = TS3 = its start, TS4 = TS5 = its end.
std::string cycleCounters(const Entry& e, int64_t origin_ns) {
  if (!namedAsCompute(e)) return "";
  const auto counter = [origin_ns](int64_t ns) {
    return static_cast<unsigned long long>(static_cast<uint64_t>(ns - origin_ns) & 0xffffffffu);
  };
  char text[160];
  const unsigned long long start = counter(e.start_ns), end = counter(e.end_ns);
  std::snprintf(text, sizeof text,
                ",\"TS1\":\"%llu\",\"TS2\":\"%llu\",\"TS3\":\"%llu\",\"TS4\":\"%llu\","
                "\"TS5\":\"%llu\"",
                start, start, start, end, end);
  return text;
}

}  // namespace

void start(int64_t origin_ns) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.entries.clear();
  r.origin_ns = origin_ns;
  g_consumers.fetch_or(kChromeTrace, std::memory_order_relaxed);
}

void record(const RuntimeStream::Impl& stream, const Op& op, int64_t start_ns, int64_t end_ns,
            bool failed) {
  int64_t activity_offset_ns = 0;
  if (const CardClock* clock = stream.context->card_clock.get()) {
    start_ns = op.card_start;
    end_ns = op.card_end;
    activity_offset_ns = clock->activityOffsetNs();
  }
  if (activityEnabled()) {
    recordActivity(stream, op, start_ns + activity_offset_ns, end_ns + activity_offset_ns, failed);
  }
  if (!chromeTraceEnabled()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!chromeTraceEnabled()) return;  // stopped between the check and now
  r.entries.push_back({start_ns, end_ns, stream.id, op.bytes, stream.priority, op.kind, op.name});
}

size_t stopAndWrite(const std::string& path, int card) {
  std::vector<Entry> entries;
  int64_t origin_ns;
  {
    Recorder& r = recorder();
    std::lock_guard<std::mutex> lock(r.mutex);
    g_consumers.fetch_and(~unsigned{kChromeTrace}, std::memory_order_relaxed);
    entries.swap(r.entries);
    origin_ns = r.origin_ns;
  }
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (!file) {
    throw Error("flex: cannot write the trace to '" + path + "': " + std::strerror(errno));
  }
  std::map<uint64_t, RuntimeStreamPriority> streams;
  for (const Entry& e : entries) streams.emplace(e.stream_id, e.priority);
  // Metadata events carry a ts too: the analyzer's sanity check wants one on every event.

  std::fprintf(file, "{\"traceEvents\":[\n");
  std::fprintf(file,
               "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"ts\":0,"
               "\"args\":{\"name\":\"flex card %d\"}}",
               card, card);
  for (const auto& [id, priority] : streams) {
    std::fprintf(file,
                 ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%llu,\"ts\":0,"
                 "\"args\":{\"name\":\"stream %llu (%s)\"}}",
                 card, static_cast<unsigned long long>(id), static_cast<unsigned long long>(id),
                 priority == RuntimeStreamPriority::HIGH ? "HIGH" : "NORMAL");
  }
  for (const Entry& e : entries) {
    std::fprintf(file,
                 ",\n{\"name\":%s,\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%llu,"
                 "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%llu%s}}",
                 jsonString(cardName(e)).c_str(), opKindName(e.kind), card,
                 static_cast<unsigned long long>(e.stream_id), (e.start_ns - origin_ns) / 1e3,
                 (e.end_ns - e.start_ns) / 1e3, static_cast<unsigned long long>(e.bytes),
                 cycleCounters(e, origin_ns).c_str());
  }
  std::fprintf(file, "\n],\"displayTimeUnit\":\"ms\"}\n");
  if (std::fclose(file) != 0) {
    throw Error("flex: cannot write the trace to '" + path + "': " + std::strerror(errno));
  }
  return entries.size();
}

}  // namespace flex::detail::trace
