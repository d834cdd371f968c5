// The CPUs the stub's own threads run on (docs/flex_stub.md, "Engines").
//
// A new thread inherits the affinity of the thread that starts it. Engines and
// DMA workers are often started by an engine, and the caller may have pinned an
// engine to one core (torch_spyre places an engine's compute team on cores), so
// each of them takes the CPUs of the thread that created the context instead.
#pragma once

#include <sched.h>

#include <cstddef>

namespace flex::detail {

class ThreadCpus {
 public:
  // The calling thread's CPUs (all of them if they cannot be read).
  static ThreadCpus ofCallingThread();

  // Gives the calling thread these CPUs; nothing if they were not read.
  void applyToCallingThread() const;

  // How many CPUs, at least 1.
  size_t count() const;

 private:
  cpu_set_t set_{};
  bool known_ = false;
};

}  // namespace flex::detail
