// Executing one operation on an engine thread. Device time is emulated by
// sleeping (never by burning CPU), and every failure becomes a message.
#include "operations.hpp"

#include <cxxabi.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "clock.hpp"

namespace flex::detail {
namespace {

// Strictly increasing across the process: two records separated by any work
// never share a timestamp, so elapsed times between them are > 0.
int64_t recordTimestampNs() {
  static std::atomic<int64_t> last{0};
  int64_t now = nowNs();
  int64_t previous = last.load(std::memory_order_relaxed);
  do {
    now = std::max(now, previous + 1);
  } while (!last.compare_exchange_weak(previous, now, std::memory_order_relaxed));
  return now;
}

// The ranges of a host <-> device copy: the host buffer is contiguous.
std::vector<CopyRange> transferRanges(const DevSpan& span, char* host, bool to_device) {
  std::vector<CopyRange> ranges;
  span.forEach([&](const DevPiece& piece) {
    ranges.push_back(to_device ? CopyRange{piece.ptr, host, piece.size}
                               : CopyRange{host, piece.ptr, piece.size});
    host += piece.size;
  });
  return ranges;
}

// Walks both spans in step: their piece boundaries need not line up.
std::vector<CopyRange> deviceToDeviceRanges(const DevSpan& dst, const DevSpan& src) {
  std::vector<DevPiece> sources;
  src.forEach([&](const DevPiece& piece) { sources.push_back(piece); });
  std::vector<CopyRange> ranges;
  size_t index = 0;
  size_t consumed = 0;  // bytes already taken from sources[index]
  dst.forEach([&](const DevPiece& piece) {
    size_t written = 0;
    while (written < piece.size) {
      const DevPiece& from = sources[index];
      const size_t length = std::min(piece.size - written, from.size - consumed);
      ranges.push_back({piece.ptr + written, from.ptr + consumed, length});
      written += length;
      consumed += length;
      if (consumed == from.size) {
        ++index;
        consumed = 0;
      }
    }
  });
  return ranges;
}

bool overlaps(const DevSpan& a, const DevSpan& b) {
  bool any = false;
  a.forEach([&](const DevPiece& x) {
    b.forEach([&](const DevPiece& y) {
      any = any || (x.ptr < y.ptr + y.size && y.ptr < x.ptr + x.size);
    });
  });
  return any;
}

void copyDeviceToDevice(const DevSpan& dst, const DevSpan& src, DmaEngines& dma) {
  if (overlaps(dst, src)) {
    // A copy within one allocation (a tensor shifted inside its storage)
    // cannot be split: memmove each range, in order, on this engine.
    for (const CopyRange& range : deviceToDeviceRanges(dst, src)) {
      std::memmove(range.dst, range.src, range.size);
    }
    return;
  }
  dma.copy(deviceToDeviceRanges(dst, src));
}

void fill(const DevSpan& span, const FillElement& element) {
  // A 64-byte block of whole elements (64 is a multiple of every width), kept
  // in phase across pieces that split an element.
  uint8_t block[64];
  size_t phase = 0;
  span.forEach([&](const DevPiece& piece) {
    for (size_t i = 0; i < sizeof block; ++i) block[i] = element.bytes[(phase + i) % element.width];
    size_t done = 0;
    for (; done + sizeof block <= piece.size; done += sizeof block) {
      std::memcpy(piece.ptr + done, block, sizeof block);
    }
    std::memcpy(piece.ptr + done, block, piece.size - done);
    phase = (phase + piece.size) % element.width;
  });
}

void transfer(const Op& op, Scheduler& scheduler) {
  const Clock::time_point start = Clock::now();
  scheduler.dma().copy(transferRanges(op.dev, static_cast<char*>(op.host), op.kind == OpKind::H2D));
  const double rate = scheduler.config().dma_bytes_per_ns;
  if (rate > 0) {
    scheduler.sleepUntil(start + std::chrono::nanoseconds(static_cast<int64_t>(op.bytes / rate)));
  }
  if (op.fn) op.fn();
}

}  // namespace

bool executeOp(const Op& op, Scheduler& scheduler, std::string& error) {
  try {
    switch (op.kind) {
      case OpKind::H2D:
      case OpKind::D2H: transfer(op, scheduler); break;
      case OpKind::D2D: copyDeviceToDevice(op.dev, op.dev_src, scheduler.dma()); break;
      case OpKind::Fill: fill(op.dev, op.fill); break;
      case OpKind::Compute:
      case OpKind::HostCallback: op.fn(); break;
      case OpKind::Delay: scheduler.sleepUntil(Clock::now() + op.delay); break;
      case OpKind::EventRecord: op.sync->complete(recordTimestampNs()); break;
      case OpKind::EventWait:
      case OpKind::Gate:
      case OpKind::Graph: break;  // handled by the scheduler (a wait parks; a graph runs its nodes)
    }
    return true;
  } catch (const abi::__forced_unwind&) {
    throw;  // pthread_exit() (e.g. Python ending a thread at exit) must unwind
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "flex: operation threw an exception that is not a std::exception";
  }
  return false;
}

const char* opKindName(OpKind kind) {
  switch (kind) {
    case OpKind::H2D: return "h2d";
    case OpKind::D2H: return "d2h";
    case OpKind::D2D: return "d2d";
    case OpKind::Fill: return "fill";
    case OpKind::Compute: return "compute";
    case OpKind::HostCallback: return "host_callback";
    case OpKind::Delay: return "delay";
    case OpKind::EventRecord: return "event_record";
    case OpKind::EventWait: return "event_wait";
    case OpKind::Gate: return "gate";
    case OpKind::Graph: return "graph";
  }
  return "unknown";
}

}  // namespace flex::detail
