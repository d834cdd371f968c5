// An engine computes with its own OpenMP team (libgomp keeps one per master
// thread), whose threads wake one another at every parallel region. Linux
// places a woken thread on its waker's core when it judges the last-level
// cache busy (as it does for about 100 ms after the host ran flat out, e.g.
// through a gc.collect()), so an engine and its worker end up taking turns on
// one core while the other idles, and a 512x512 matmul takes 1.7x as long.
// Pinning each team thread to a core of its own keeps them apart
// (docs/performance.md, "Engine teams on cores"). It is opt-in: a pinned
// thread cannot leave a core that another program keeps busy, and with one
// such neighbour pinned teams ran 1.6x to 2.6x slower than unpinned ones.
#include "aten/engine_team.h"

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "aten/openmp.h"
#include "runtime/runtime.h"

namespace spyre {
namespace {

// SPYRE_PIN_ENGINE_TEAMS, parsed once: "1" asks for placement, unset or "0"
// leaves teams to the OS scheduler; anything else is reported at every launch.
struct Setting {
  bool pin = false;
  std::string error;
};

Setting parseSetting() {
  const char* env = std::getenv("SPYRE_PIN_ENGINE_TEAMS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return {};
  if (std::strcmp(env, "1") == 0) return {true, ""};
  return {false, std::string("SPYRE_PIN_ENGINE_TEAMS='") + env +
                     "' is not valid (expected 1 to pin each engine's intra-op threads to cores "
                     "of their own, or 0 or unset to leave them to the OS scheduler)"};
}

const Setting& setting() {
  static const Setting parsed = parseSetting();
  return parsed;
}

// The cores engines may use: the engine's own CPUs before any pinning (the
// runtime starts every engine with the CPUs of the thread that created it).
// Empty when placement is off: not asked for, libgomp binding its threads
// itself (OMP_PROC_BIND, GOMP_CPU_AFFINITY set), or a single core.
std::vector<int> placementCores() {
  if (!setting().pin || std::getenv("OMP_PROC_BIND") != nullptr ||
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

void pinCallingThread(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);  // best effort: a refusal leaves it where it was
}

struct Placement {
  const std::vector<int>* cores;
  int first;  // core index of the team's thread 0

  // Run by every thread of the team (thread 0 is the engine itself).
  static void pinTeamThread(void* data) {
    const auto* placement = static_cast<const Placement*>(data);
    const std::vector<int>& cores = *placement->cores;
    const size_t index = static_cast<size_t>(placement->first + omp_get_thread_num());
    pinCallingThread(cores[index % cores.size()]);
  }
};

std::atomic<int> next_team{0};
thread_local int placed_team_size = 0;

}  // namespace

void checkEngineTeamSetting() {
  const Setting& parsed = setting();
  TORCH_CHECK_VALUE(parsed.error.empty(), parsed.error);
}

void placeEngineTeam() {
  const int threads = omp_get_max_threads();  // the team the kernel will fork
  if (placed_team_size == threads) return;
  placed_team_size = threads;
  static const std::vector<int> cores = placementCores();
  if (cores.empty()) return;
  // Teams start on different cores, so one-thread teams (torchrun's default,
  // two streams with torch.set_num_threads(1)) and the processes of one host
  // (a device each) spread out.
  Placement placement{&cores, static_cast<int>(boundDevice()) + next_team.fetch_add(1)};
  GOMP_parallel(&Placement::pinTeamThread, &placement, static_cast<unsigned>(threads), 0);
}

}  // namespace spyre
