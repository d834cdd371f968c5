// flex_stub: a software emulation of the Spyre "flex" runtime.
//
// This header is the whole public API of libflex_stub.so. It keeps the names the
// real runtime uses (flex::RuntimeContext, flex::RuntimeStream, DmaParams, ...)
// so code written against it reads like code written against the card.
//
// Emulation model (docs/flex_stub.md has the full description):
//  * One context per process, for one logical device, created by
//    RuntimeContext::create() and owned by the library until process exit.
//    The context owns every stream it creates; callers never free a stream.
//  * A stream is a FIFO of operations. A pool of engine threads (FLEX_STUB_ENGINES)
//    executes operations: one operation of a stream at a time, in launch order;
//    different streams run concurrently with each other and with the host.
//    When engines are contended, HIGH-priority streams are served first.
//  * Device time is emulated by sleeping, never by burning CPU.
//  * Errors latch: an operation that fails puts its stream into an error state;
//    the next synchronize()/query() throws the failure once, and later launches
//    onto that stream throw. Other streams are unaffected.
//
// Thread safety: every member function may be called from any thread.
// Launch parameters are copied at launch; host buffers named by a launch must
// stay valid until the operation completes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace flex {

// ---------------------------------------------------------------- errors
// Every failure the runtime reports is a flex::Error (or a subclass) whose
// what() names the values involved.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device memory exhausted (FLEX_STUB_MEMORY_BYTES).
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// ---------------------------------------------------------------- devices
// Number of devices visible to this process, computed from the environment
// without creating a context (see docs/flex_stub.md, "Devices"):
//   FLEX_STUB_CARDS   cards on the emulated host (default 8)
//   SPYRE_DEVICES     comma list of card indices (wins); duplicates removed,
//                     out-of-range entries dropped, spaces tolerated
//   AIU_WORLD_SIZE    else: count, capped at the card count; < 1 is an error
//   LOCAL_WORLD_SIZE  else: count (set by torchrun), capped at the card count
//   otherwise every card (FLEX_STUB_CARDS), as on a real host.
// Throws flex::Error naming the variable when a value is malformed.
int getNumDevices();

// The physical card index behind a logical device index (SPYRE_DEVICES order).
int getCardIndex(int logical_device);

// ---------------------------------------------------------------- enums
enum class RuntimeStreamPriority { NORMAL, HIGH };
enum class RuntimeStreamMode { STRICT_ORDERING };
enum class DataFormats { FP32, FP16, BF16, INT8, INT16, INT32, INT64, BYTES };

// ---------------------------------------------------------------- memory
// One contiguous piece of device memory.
struct Chunk {
  void* device_ptr = nullptr;
  size_t size = 0;
};

// A device address: an ordered list of chunks (the stub allocates one chunk per
// allocation). Device pointers are opaque to the host: they are only ever read
// or written by stream operations. The stub maps them with no access, so a host
// read or write through one stops the process with a report on stderr.
struct CompositeAddress {
  std::vector<Chunk> chunks;
  CompositeAddress() = default;
  CompositeAddress(void* device_ptr, size_t size) : chunks{{device_ptr, size}} {}
  size_t total_size() const {
    size_t n = 0;
    for (const auto& c : chunks) n += c.size;
    return n;
  }
};

// What a device offers, as its context was configured at creation.
struct DeviceProperties {
  std::string name;
  int card_index = 0;
  size_t total_memory = 0;  // bytes (FLEX_STUB_MEMORY_BYTES)
  size_t engines = 0;       // execution engines; 0: unlimited (FLEX_STUB_ENGINES unset)
  size_t dma_engines = 0;   // threads that share one large copy (FLEX_STUB_DMA_ENGINES)
};

// Where the runtime's own executors (engine threads running kernels, DMA
// engines, graph replays, a collective transport acting as the card's DMA peer)
// reach the byte at `device_ptr`: a read-write view of the same memory. Only
// code running inside a stream operation may use it; any other pointer is
// returned unchanged. One range check and one add.
void* executorAddress(const void* device_ptr);

// A function the device-memory fault report calls last, with the fd it writes
// to (2), to add what the runtime cannot know (the Python stack). It runs in a
// signal handler: it must be async-signal-safe.
void setDeviceFaultReporter(void (*reporter)(int fd));

struct MemoryStats {
  size_t allocated_bytes = 0;       // currently allocated
  size_t peak_allocated_bytes = 0;  // high-water mark
  size_t total_bytes = 0;           // FLEX_STUB_MEMORY_BYTES
  uint64_t num_allocs = 0;
  uint64_t num_frees = 0;
};

// ---------------------------------------------------------------- operations
// Host <-> device DMA. `host_ptr` must stay valid until the operation completes.
// `callback`, if set, runs on the engine right after the copy (in stream order).
struct DmaParams {
  void* host_ptr = nullptr;
  size_t size = 0;
  bool to_device = true;
  CompositeAddress dev;  // copied at launch
  size_t dev_offset = 0;  // byte offset into `dev`
  std::function<void()> callback;

  DmaParams() = default;
  DmaParams(void* host, size_t bytes, bool to_dev, const CompositeAddress* d)
      : host_ptr(host), size(bytes), to_device(to_dev), dev(*d) {}
};

// Device -> device copy of `size` bytes.
struct D2DParams {
  CompositeAddress src;
  size_t src_offset = 0;
  CompositeAddress dst;
  size_t dst_offset = 0;
  size_t size = 0;
};

// What a compute kernel does on the card, for the card time model
// (FLEX_STUB_TIMING=card, flex/card.hpp): its multiply-adds and the bytes it
// reads and writes in device memory. All zero: not counted (the model then
// prices the launch's `bytes` as one read and one write).
struct WorkCost {
  // How the kernel streams memory: plain, with a broadcast operand (loaded
  // once, reused), a reduction of `rows` rows (a full read, a small write), or
  // a stick-plane transport (`transport`, rows x cols).
  enum class Access : uint8_t { Stream, Broadcast, Reduction, Transport };
  // The kernel's class: it sets the multiply-add rate and where the card
  // summary counts the kernel's time. Uncounted: priced by the fallback rule.
  enum class Class : uint8_t {
    Uncounted, Pointwise, Matmul, BatchedMatmul, Projection, Normalization, Reduction,
    DataMovement
  };
  // Stick-plane transports, by upstream's names (docs/timing.md).
  enum class Transport : uint8_t { Cat0, Cat1, TransposeOuter, Restickify, ReduceOuter };
  uint64_t macs = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  Access access = Access::Stream;
  uint64_t rows = 0;  // Reduction: the rows of its input; Transport: its rows
  Class kind = Class::Pointwise;
  // Matmul classes: the batch (1 for 2-D), one matmul's output rows and
  // columns, and the operands' bytes |A| + |B| (what a tile spill re-reads).
  uint64_t batch = 1;
  uint64_t out_rows = 0;
  uint64_t out_cols = 0;
  uint64_t operand_bytes = 0;
  // Transport: the stick dim's length and, for TransposeOuter, the swapped
  // outer dim (the output's contiguous stick run).
  Transport transport = Transport::Cat1;
  uint64_t cols = 0;
  uint64_t outer = 0;
};

// Compute: a host function executed on the device's timeline (how the stub runs
// kernels). It may read and write device memory through the pointers it was
// given. `bytes` feeds the trace; `cost` only the card time model.
struct ComputeParams {
  std::function<void()> fn;
  std::string name = "compute";
  size_t bytes = 0;
  WorkCost cost;
  // Optional: called (on the thread that discards it) instead of `fn` when the
  // operation is discarded without running (its stream failed before it, or
  // the runtime shut down), so that what `fn` would have released is released.
  // A plain function and its argument: a closure that owns nothing stays
  // small enough for std::function to keep inline.
  void (*on_discard)(void*) = nullptr;
  void* discard_arg = nullptr;
};

// Host callback: runs in stream order on an engine thread, like cudaLaunchHostFunc.
struct HostCallbackParams {
  std::function<void()> fn;
  std::string name = "host_callback";
};

class RuntimeStream;
class RuntimeContext;
class RuntimeGraph;

// ---------------------------------------------------------------- events
// A marker in a stream's work. Every record() is its own completion state:
// a wait enqueued before a re-record still waits for the earlier record.
// An event that was never recorded is complete.
class RuntimeEvent {
 public:
  explicit RuntimeEvent(bool enable_timing = false, bool blocking = false);
  ~RuntimeEvent();
  RuntimeEvent(const RuntimeEvent&) = delete;
  RuntimeEvent& operator=(const RuntimeEvent&) = delete;

  // Capture all work launched on `stream` so far.
  void record(RuntimeStream* stream);
  // Enqueue a wait on `stream`: its later work runs after the last record
  // completes. The host does not wait.
  void wait(RuntimeStream* stream);
  // True when the last record has completed (or the event was never recorded).
  bool query() const;
  // Block the host until the last record completes: a bounded spin (at most
  // 50 us), then a sleep on a condition variable, for `blocking` events and
  // others alike.
  void synchronize() const;
  // Milliseconds of emulated device time between this event's record and
  // `end`'s. Both must be timing-enabled, recorded and complete.
  double elapsedTime(const RuntimeEvent& end) const;

  bool timingEnabled() const;
  bool recorded() const;

  struct State;  // implementation detail
 private:
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------- streams
class RuntimeStream {
 public:
  // Enqueue operations. All return at once; they throw flex::Error
  // "Cannot schedule operation on stream in error state" once the stream has
  // failed, and flex::Error on bad arguments (null pointers, out-of-range
  // device addresses).
  void launchOperationH2D(const DmaParams* params);
  void launchOperationD2H(const DmaParams* params);
  void launchOperationD2D(const D2DParams* params);
  void launchOperationCompute(const ComputeParams* params);
  // The same, taking the function out of `params` (moved, not copied): the
  // launch of a closure built for this one operation.
  void launchOperationCompute(ComputeParams&& params);
  void launchOperationHostCallback(const HostCallbackParams* params);
  // Device-side fill of `dev` with `value` converted to `format`.
  void fillAsync(const CompositeAddress* dev, double value, DataFormats format,
                 bool use_dmai = false);
  // Occupy the stream for `duration` of emulated device time.
  void launchOperationDelay(std::chrono::nanoseconds duration);
  // Queue every node of `graph` as one operation: one engine runs the nodes
  // in the order they were added. Returns at once; the nodes launched are
  // those added before the call. A node that throws fails the stream as any
  // operation does; the nodes after it do not run.
  void launchGraph(const RuntimeGraph& graph);

  // True iff every launched operation has finished (none queued or running).
  // Throws the stream's pending failure once.
  bool query();
  // Block until everything launched before the call has finished: a bounded
  // spin (at most 50 us), then a sleep. Returns at once, enqueuing nothing,
  // when the stream is idle. Throws the stream's pending failure once.
  void synchronize();
  // Sticky: the stream has failed and cannot take more work. The name is the
  // card runtime's (flex's RuntimeStream API, which upstream torch-spyre
  // calls): code written against this header runs on a card unchanged.
  bool needsShutdown() const;
  // The failure message, empty when the stream is healthy.
  std::string errorMessage() const;

  RuntimeStreamPriority priority() const;
  uint64_t streamId() const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  // Created and destroyed by the context only: a caller can neither make nor
  // delete a stream (the context owns every stream it hands out).
  friend class RuntimeContext;
  friend struct StreamDeleter;  // the context's owning pointers (src/context_impl.hpp)
  explicit RuntimeStream(std::unique_ptr<Impl> impl);
  ~RuntimeStream();
  RuntimeStream(const RuntimeStream&) = delete;
  RuntimeStream& operator=(const RuntimeStream&) = delete;
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------- graphs
// A sequence of device operations recorded once and launched many times as one
// stream operation (RuntimeStream::launchGraph): the runtime's graph. Nodes are
// device-to-device copies, fills and computes, added in the order they run (a
// valid order of their dependencies). Each add is checked as the matching
// launch is; the device memory a node names must stay allocated for as long as
// the graph can be launched. A compute node's function runs once per launch, so
// it must be callable again. While activities are recorded (flex/activity.hpp)
// a launch yields one record of kind Graph spanning the whole launch plus one
// record per node, each with the graph launch's correlation ids.
// Copies share the nodes; a launch keeps the nodes it runs alive until it ends.
class RuntimeGraph {
 public:
  RuntimeGraph();
  ~RuntimeGraph();
  RuntimeGraph(const RuntimeGraph&);
  RuntimeGraph& operator=(const RuntimeGraph&);

  void addD2D(const D2DParams* params);
  void addCompute(const ComputeParams* params);
  void addFill(const CompositeAddress* dev, double value, DataFormats format);
  size_t nodeCount() const;

  struct Nodes;  // implementation detail
  const std::shared_ptr<const Nodes>& nodes() const;

 private:
  std::shared_ptr<const Nodes> nodes_;
};

// ---------------------------------------------------------------- peer access
// A stream operation during which a DMA peer outside the device reads and
// writes device memory: the collective transport (on a card, a NIC's or another
// card's DMA engine; in the stub, the threads of the host library that moves a
// collective's bytes). The window opens when its stream reaches it and holds
// the stream there (parked: no engine is held) until the peer closes it, so the
// peer's accesses are ordered with the stream's other work like any operation's.
// The peer reaches the bytes through executorAddress(), and only between
// waitOpen() returning true and close().
class PeerAccessWindow {
 public:
  PeerAccessWindow();
  // Closes the window: a stream never stays parked on a window nobody holds.
  ~PeerAccessWindow();
  PeerAccessWindow(const PeerAccessWindow&) = delete;
  PeerAccessWindow& operator=(const PeerAccessWindow&) = delete;

  // Queue the window on `stream` (once; `name` labels it in traces). Throws as
  // a launch does (a stream in the error state, a second call).
  void enqueueOn(RuntimeStream* stream, const std::string& name);
  // Block the host until the stream reaches the window. True: it is open, the
  // peer may access device memory until close(). False: it never opens (the
  // stream failed before reaching it, or the runtime shut down); the stream's
  // errorMessage() says why.
  bool waitOpen() const;
  // Reached and not yet closed (does not block).
  bool isOpen() const;
  // Let the stream go on. Harmless when not open yet (the window then passes
  // at once) or already closed.
  void close();
  // Close the window when `other` reaches this point (after the work queued on
  // it before: a collective's copies back), or when `other` drops it (it
  // failed, or shutdown): the window never outlives what it waits for. Throws
  // as a launch does (a stream in the error state: then close() yourself).
  void closeWhenReached(RuntimeStream* other);

  struct State;  // implementation detail
 private:
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------- context
class RuntimeContext {
 public:
  // Create the process's context for `logical_device` (< getNumDevices()).
  // Returns a non-owning pointer: the library owns the context for the process
  // lifetime. Calling it again for the same device returns the same context;
  // for another device it throws flex::Error.
  static RuntimeContext* create(int logical_device);
  // The context created by create(), or nullptr.
  static RuntimeContext* get();

  int deviceIndex() const;
  int cardIndex() const;
  DeviceProperties properties() const;

  // The default stream (NORMAL priority), the same pointer on every call.
  RuntimeStream* getDefaultStream();
  // A new stream owned by the context. Cheap: no thread is created.
  RuntimeStream* createStream(
      RuntimeStreamPriority priority = RuntimeStreamPriority::NORMAL,
      RuntimeStreamMode mode = RuntimeStreamMode::STRICT_ORDERING,
      bool track_hazards = false);
  // True if any stream of the context is latched in the error state.
  bool hasStreamError() const;

  // Device memory. Throws OutOfMemoryError past FLEX_STUB_MEMORY_BYTES.
  void* allocate(size_t nbytes);
  void deallocate(void* device_ptr);
  bool isDevicePtr(const void* ptr) const;
  MemoryStats memoryStats() const;

  // Pinned host memory: page-locked in spirit (the stub uses aligned host
  // memory). isPinnedPtr() answers for any pointer inside such a block.
  void* allocatePinned(size_t nbytes);
  void deallocatePinned(void* host_ptr);
  bool isPinnedPtr(const void* ptr) const;

  struct Impl;
  Impl* impl() const { return impl_.get(); }

 private:
  // The library owns the context until process exit: no caller deletes it.
  explicit RuntimeContext(int logical_device);
  ~RuntimeContext();
  RuntimeContext(const RuntimeContext&) = delete;
  RuntimeContext& operator=(const RuntimeContext&) = delete;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flex
