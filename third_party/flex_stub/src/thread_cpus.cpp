#include "thread_cpus.hpp"

#include <algorithm>
#include <thread>

namespace flex::detail {

ThreadCpus ThreadCpus::ofCallingThread() {
  ThreadCpus cpus;
  cpus.known_ = sched_getaffinity(0, sizeof cpus.set_, &cpus.set_) == 0;
  return cpus;
}

void ThreadCpus::applyToCallingThread() const {
  if (known_) sched_setaffinity(0, sizeof set_, &set_);  // best effort: a refusal keeps the inherited set
}

size_t ThreadCpus::count() const {
  if (known_) return std::max(CPU_COUNT(&set_), 1);
  return std::max(std::thread::hardware_concurrency(), 1u);
}

}  // namespace flex::detail
