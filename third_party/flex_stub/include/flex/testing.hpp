// flex_stub testing facilities: deterministic tests, fault injection, tracing.
//
// Part of the emulated runtime only. Code that must also run on a card includes
// <flex/flex.hpp> alone; tests, examples and benchmarks that drive the emulator
// include this header too (torch_spyre exposes it as torch_spyre.testing).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "flex/flex.hpp"

namespace flex::test {

// A gate blocks every stream it was enqueued on until the host releases it.
// Releasing twice is harmless; destroying an unreleased gate releases it.
class Gate {
 public:
  Gate();
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  void enqueueOn(RuntimeStream* stream);
  void release();
  // Number of streams currently blocked at this gate (reached it, not released).
  int blockedStreams() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// Make the next operation executed on `stream` fail with `message`.
void injectFault(RuntimeStream* stream, const std::string& message);

// Chrome trace (also driven by FLEX_STUB_TRACE=path.json at process exit).
void startTrace();
// Write everything recorded since startTrace() to `path`; returns the number of
// operations written.
size_t stopTrace(const std::string& path);

// Number of operations launched / completed so far on `stream`.
uint64_t launchedOps(const RuntimeStream* stream);
uint64_t completedOps(const RuntimeStream* stream);

// How many times the card clock has merged its busy intervals since the
// context was created (0 without card timing): the merge is amortised.
uint64_t cardCompactions();

// The device fault report's tests. lockDeviceMemoryRegistry: the calling
// thread holds the lock of the registry of device allocations (as an
// allocation in progress does) until unlockDeviceMemoryRegistry from the same
// thread. exhaustDeviceMemoryBacking: the shared memory behind device memory
// backs no page any more, as when the host is out of shared memory: the next
// access an executor makes raises SIGBUS and the process dies with a report.
// No-ops before the first device allocation.
void lockDeviceMemoryRegistry();
void unlockDeviceMemoryRegistry();
void exhaustDeviceMemoryBacking();

}  // namespace flex::test
