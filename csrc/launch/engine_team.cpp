// An engine computes with its own OpenMP team (libgomp keeps one per master
// thread), whose threads wake one another at every parallel region. Linux
// places a woken thread on its waker's core when it judges the last-level
// cache busy (as it does for a while after the host ran flat out, e.g.
// through a gc.collect()), so an engine and its worker end up taking turns on
// one core while the other idles. Pinning each team thread to a core of its
// own keeps them apart (docs/performance.md, "Engine teams on cores", has the
// figures). But a pinned thread cannot leave a core that another program
// keeps busy, so by default a
// team is pinned only while its threads get their cores: each engine watches
// how long its team's threads waited for a CPU (the kernel's schedstat), and
// hands a contended team back to the scheduler, trying again later. Placing a
// team is a parallel region of its own, after which its workers spin on a core
// for milliseconds (libgomp's active wait): a team is placed at the first
// kernel that may fork it, never for kernels too small to (a loop of small
// ops would share its cores with a spinning worker it never needed).
#include "launch/engine_team.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ATen/TensorIterator.h>
#include <c10/util/Exception.h>

#include "launch/openmp.h"
#include "runtime/runtime.h"

namespace spyre {
namespace {

using Clock = std::chrono::steady_clock;

// SPYRE_PIN_ENGINE_TEAMS, parsed once; a bad value is reported at every launch.
enum class Mode { Off, Always, WhileFree };

struct Setting {
  Mode mode = Mode::WhileFree;
  std::string error;
};

Setting parseSetting() {
  const char* env = std::getenv("SPYRE_PIN_ENGINE_TEAMS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0) return {};
  if (std::strcmp(env, "0") == 0) return {Mode::Off, ""};
  if (std::strcmp(env, "1") == 0) return {Mode::Always, ""};
  return {Mode::Off,
          std::string("SPYRE_PIN_ENGINE_TEAMS='") + env +
              "' is not valid (expected auto or unset to pin each engine's intra-op threads to "
              "cores of their own while no other thread needs those cores, 1 to pin them "
              "always, or 0 to leave them to the OS scheduler)"};
}

const Setting& setting() {
  static const Setting parsed = parseSetting();
  return parsed;
}

// The cores engines may use: the engine's own CPUs before any pinning (the
// runtime starts every engine with the CPUs of the thread that created it).
// Empty when placement is off: SPYRE_PIN_ENGINE_TEAMS=0, libgomp binding its
// threads itself (OMP_PROC_BIND, GOMP_CPU_AFFINITY set), or a single core.
std::vector<int> placementCores() {
  if (setting().mode == Mode::Off || std::getenv("OMP_PROC_BIND") != nullptr ||
      std::getenv("GOMP_CPU_AFFINITY") != nullptr) {
    return {};
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
  std::vector<int> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cores.push_back(cpu);
  }
  if (cores.size() < 2) cores.clear();
  return cores;
}

const std::vector<int>& cores() {
  static const std::vector<int> placement = placementCores();
  return placement;
}

// How a team is watched while pinned: its threads' waits for a CPU are summed
// over a window of kernels at least kWindow long; more than kContended of the
// window means some thread shares its core. A released team is pinned again
// after a back-off that doubles, up to kMaxBackoff, while contention lasts.
constexpr auto kWindow = std::chrono::milliseconds(25);
constexpr double kContended = 0.10;
constexpr auto kFirstBackoff = std::chrono::seconds(1);
constexpr auto kMaxBackoff = std::chrono::seconds(16);

// Nanoseconds a thread waited on a run queue (the second field of
// /proc/self/task/TID/schedstat); -1 when the kernel does not keep it.
int64_t runQueueWait(int fd) {
  char text[96];
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  char* end = nullptr;
  std::strtoull(text, &end, 10);  // time on a CPU
  if (end == text) return -1;
  return static_cast<int64_t>(std::strtoull(end, nullptr, 10));
}

// What one engine thread knows of its team.
class Team {
 public:
  ~Team() { closeStats(); }

  // Before each kernel: (re)place a team of `threads` and, while placement
  // is conditional, check whether it should change. Pinning a team of two or
  // more forks it, so it waits for a kernel that `may_fork` the team anyway.
  void beforeKernel(int threads, bool may_fork) {
    if (threads != size_) {
      if (threads > 1 && !may_fork) return;
      size_ = threads;
      backoff_ = kFirstBackoff;
      // One-thread teams (torchrun's ranks) wake no worker: only an explicit
      // request pins them.
      if (setting().mode == Mode::Always || threads > 1) {
        pin(Clock::now());
      } else if (pinned_) {
        release(Clock::now());
      }
      return;
    }
    if (setting().mode != Mode::WhileFree || threads < 2) return;
    const Clock::time_point now = Clock::now();
    if (now < next_check_) return;
    if (!pinned_) {
      if (may_fork) pin(now);
      return;
    }
    const int64_t waited = teamWait();
    if (waited < 0) {  // no schedstat: never keep a team pinned unwatched
      release(now + kMaxBackoff);
      return;
    }
    const auto window = std::chrono::duration_cast<std::chrono::nanoseconds>(now - window_start_);
    if (static_cast<double>(waited - waited_at_start_) > kContended * window.count()) {
      release(now + backoff_);
      backoff_ = std::min<Clock::duration>(backoff_ * 2, kMaxBackoff);
      return;
    }
    backoff_ = kFirstBackoff;
    startWindow(now, waited);
  }

 private:
  struct Assignment {
    Team* team;
    int first;  // core index of thread 0; -1 hands every thread all cores
  };

  // Run by every thread of the team (thread 0 is the engine itself).
  static void placeTeamThread(void* data) {
    const auto* assignment = static_cast<const Assignment*>(data);
    const std::vector<int>& all = cores();
    const int index = omp_get_thread_num();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (assignment->first < 0) {
      for (int cpu : all) CPU_SET(cpu, &set);
    } else {
      CPU_SET(all[static_cast<size_t>(assignment->first + index) % all.size()], &set);
    }
    sched_setaffinity(0, sizeof set, &set);  // best effort: a refusal leaves it where it was
    assignment->team->tids_[static_cast<size_t>(index)] = static_cast<int>(syscall(SYS_gettid));
  }

  void assign(int first) {
    tids_.assign(static_cast<size_t>(size_), 0);
    Assignment assignment{this, first};
    GOMP_parallel(&Team::placeTeamThread, &assignment, static_cast<unsigned>(size_), 0);
  }

  void pin(Clock::time_point now) {
    // Teams start on different cores, so one-thread teams and the processes
    // of one host (a device each) spread out.
    static std::atomic<int> next_team{0};
    assign(static_cast<int>(boundDevice()) + next_team.fetch_add(1));
    pinned_ = true;
    if (setting().mode == Mode::WhileFree) {
      openStats();
      startWindow(now, teamWait());
    }
  }

  void release(Clock::time_point retry_at) {
    assign(-1);
    pinned_ = false;
    next_check_ = retry_at;
  }

  void startWindow(Clock::time_point now, int64_t waited) {
    window_start_ = now;
    waited_at_start_ = waited;
    next_check_ = now + kWindow;
  }

  void openStats() {
    closeStats();
    for (int tid : tids_) {
      const std::string path = "/proc/self/task/" + std::to_string(tid) + "/schedstat";
      stat_fds_.push_back(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    }
  }

  void closeStats() {
    for (int fd : stat_fds_) {
      if (fd >= 0) close(fd);
    }
    stat_fds_.clear();
  }

  // The team's summed run-queue wait in ns, or -1 if one is unknown.
  int64_t teamWait() const {
    int64_t sum = 0;
    for (int fd : stat_fds_) {
      const int64_t waited = fd < 0 ? -1 : runQueueWait(fd);
      if (waited < 0) return -1;
      sum += waited;
    }
    return sum;
  }

  int size_ = 0;
  bool pinned_ = false;
  std::vector<int> tids_;
  std::vector<int> stat_fds_;
  Clock::time_point window_start_;
  Clock::time_point next_check_;
  int64_t waited_at_start_ = 0;
  Clock::duration backoff_ = kFirstBackoff;
};

thread_local Team team;

}  // namespace

void checkEngineTeamSetting() {
  const Setting& parsed = setting();
  TORCH_CHECK_VALUE(parsed.error.empty(), parsed.error);
}

bool mayForkTeam(int64_t largest_numel, bool contracts) {
  return contracts || largest_numel >= at::internal::GRAIN_SIZE;
}

void placeEngineTeam(bool may_fork) {
  if (cores().empty()) return;
  team.beforeKernel(omp_get_max_threads(), may_fork);  // the team the kernel may fork
}

}  // namespace spyre
