// Helpers shared by the flex_stub tests.
#pragma once

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "flex/flex.hpp"
#include "flex/testing.hpp"
#include "harness.hpp"

namespace util {

using Clock = std::chrono::steady_clock;

inline double msSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// CPU time used by the whole process (all threads).
inline double cpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Threads of this process. A sanitizer may add a helper thread at the first
// pthread_create: call baselineThreadCount() for the reference value.
inline int threadCount() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
    closedir(dir);
  }
  return count;
}

inline int baselineThreadCount() {
  std::thread([] {}).join();
  return threadCount();
}

// Sleeps until `flag` is set, at most 10 s, so a test that fails before setting
// it still ends (the runtime lets a running operation finish at exit).
inline void sleepUntilSet(const std::atomic<bool>& flag) {
  const auto start = Clock::now();
  while (!flag.load() && msSince(start) < 10000) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

inline void setEnv(const char* name, const char* value) { setenv(name, value, 1); }

// Polls `condition` (an asynchronous state the test cannot be notified of,
// such as "the stream reached the gate"); fails after `timeout_s`.
#define WAIT_UNTIL(condition)                                                          \
  do {                                                                                 \
    const auto wait_start_ = util::Clock::now();                                       \
    while (!(condition)) {                                                             \
      if (util::msSince(wait_start_) > 10000) {                                        \
        harness::fail(__FILE__, __LINE__, "timed out waiting for " #condition);        \
      }                                                                                \
      std::this_thread::sleep_for(std::chrono::microseconds(100));                     \
    }                                                                                  \
  } while (0)

// Runs `body` in a forked child and returns its exit status (128 + signal if it
// was killed, -1 if it did not finish within `timeout_ms`). `body`'s return value
// is passed to _exit(); a body that calls exit() itself exercises normal exit.
inline int runInChild(const std::function<int()>& body, double timeout_ms = 20000) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: unexpected exception: %s\n", e.what());
    }
    std::fflush(nullptr);
    _exit(code);
  }
  const auto start = Clock::now();
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (msSince(start) > timeout_ms) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

inline flex::RuntimeContext* context() { return flex::RuntimeContext::create(0); }

// Launches a host callback.
inline void callback(flex::RuntimeStream* stream, std::function<void()> fn) {
  flex::HostCallbackParams params;
  params.fn = std::move(fn);
  stream->launchOperationHostCallback(&params);
}

inline void compute(flex::RuntimeStream* stream, std::function<void()> fn) {
  flex::ComputeParams params;
  params.fn = std::move(fn);
  stream->launchOperationCompute(&params);
}

}  // namespace util
