// flex activity records: what ran on the device, when, and who launched it.
//
// The runtime's profiling interface, in the spirit of CUPTI's activity API: a
// profiler enables recording, pushes its own correlation ids around the host
// code that launches work, and later flushes one record per operation that
// ran: its kind, name and size, its start and end on the device timeline, its
// stream, and the launching thread, launch time and correlation id.
//
// While recording is off nothing is kept and launches pay one relaxed atomic
// load. Recording is process wide; one consumer at a time (enable() clears the
// buffer). The FLEX_STUB_TRACE Chrome trace is an independent consumer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flex/flex.hpp"

namespace flex::activity {

enum class Kind : uint8_t {
  H2D,
  D2H,
  D2D,
  Fill,
  Compute,
  HostCallback,
  Delay,
  EventRecord,
  EventWait,
  Gate,  // flex::test::Gate (emulator tests only)
  Graph,  // RuntimeStream::launchGraph: the whole launch (its nodes have records of their own)
};

// "h2d", "d2h", "d2d", "fill", "compute", "host_callback", "delay",
// "event_record", "event_wait", "gate", "graph".
const char* kindName(Kind kind);

struct Record {
  Kind kind = Kind::Compute;
  std::string name;    // the launch's name (compute, host callback); else kindName(kind)
  uint64_t bytes = 0;  // bytes moved or filled; a compute launch's declared bytes
  // Device timeline, timestampNs() clock. A wait spans the time its stream
  // was parked on it.
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  // Host side: the launch call, on the launching thread.
  int64_t launch_start_ns = 0;
  int64_t launch_end_ns = 0;
  uint64_t launch_thread = 0;  // OS thread id (gettid)
  // The runtime thread that ran the operation (its stream's engine; gettid).
  uint64_t run_thread = 0;
  // Innermost id pushed on the launching thread at launch time; 0: none.
  uint64_t correlation_id = 0;
  // Innermost user range (pushUserCorrelationId) at launch time; 0: none.
  uint64_t user_correlation_id = 0;
  // Unique per recorded launch (never 0): ties the launch to its execution.
  uint64_t launch_id = 0;
  int device = 0;  // logical device index
  uint64_t stream_id = 0;
  RuntimeStreamPriority priority = RuntimeStreamPriority::NORMAL;
  bool failed = false;  // the operation ran and raised (the stream latched the error)
  // A graph's node: the launch_id of the graph launch that ran it (the launch
  // has a record of its own, kind Graph, spanning its nodes); 0 otherwise.
  uint64_t graph_launch_id = 0;
};

// Start recording; drops records not yet flushed. Operations launched before
// and running after enable() are recorded without launch information.
void enable();
// Stop recording. Records collected so far stay until flush().
void disable();
bool enabled();
// Takes every record collected so far, in completion order.
std::vector<Record> flush();

// A per-thread stack of correlation ids: launches made while an id is pushed
// carry the innermost one. enable() empties every thread's stack (ids a
// previous recording left pushed are stale).
void pushCorrelationId(uint64_t id);
// Pops the innermost id; harmless on an empty stack.
void popCorrelationId();
// The same for user ranges (a profiler's annotations, e.g. torch's
// record_function): a separate stack.
void pushUserCorrelationId(uint64_t id);
void popUserCorrelationId();

// Now, on the clock of start_ns/end_ns/launch_*_ns (monotonic, nanoseconds).
int64_t timestampNs();

}  // namespace flex::activity
