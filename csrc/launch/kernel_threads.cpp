#include "launch/kernel_threads.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include <ATen/Parallel.h>

namespace spyre {

namespace {

// Linux gives a process's main thread the process id as its thread id (a forked
// child's main thread is the thread that forked).
bool onMainThread() {
  thread_local const bool main = syscall(SYS_gettid) == getpid();
  return main;
}

std::atomic<int>& mainThreads() {
  static std::atomic<int> threads{0};
  return threads;
}

}  // namespace

int kernelThreads() {
  if (onMainThread()) {
    const int threads = at::get_num_threads();
    mainThreads().store(threads, std::memory_order_relaxed);
    return threads;
  }
  const int threads = mainThreads().load(std::memory_order_relaxed);
  return threads > 0 ? threads : at::intraop_default_num_threads();
}

}  // namespace spyre
