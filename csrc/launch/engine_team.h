// Which cores an engine's intra-op (OpenMP) threads run on (docs/tensors.md,
// "Engine threads on cores").
#pragma once

#include <cstdint>

namespace spyre {

// On the host, before a kernel is launched: raises ValueError naming a bad
// SPYRE_PIN_ENGINE_TEAMS value (a static's guard load once it parsed).
void checkEngineTeamSetting();

// Whether a kernel may fork its thread's OpenMP team: ATen's loops split work
// of at least at::internal::GRAIN_SIZE elements (`largest_numel`: the kernel's
// largest tensor); matmul-class and convolution kernels (`contracts`) split
// much smaller problems.
bool mayForkTeam(int64_t largest_numel, bool contracts);

// Called on an engine thread before a CPU kernel runs there. The first time
// the thread computes with N > 1 intra-op threads a kernel that may fork its
// team (`may_fork`, mayForkTeam()), each thread of its team is pinned to a
// core of its own (with SPYRE_PIN_ENGINE_TEAMS=1, one-thread teams too, at
// their first kernel). Placing a team is itself a parallel region: it wakes
// the team's workers, which then spin on a core for milliseconds, so kernels
// too small to fork the team leave it alone. By default a team whose threads
// wait for their cores is released to the scheduler and pinned again later
// (again at a kernel that may fork it); that check costs a clock read per
// kernel and a schedstat read per team thread per window of at least 25 ms.
void placeEngineTeam(bool may_fork);

}  // namespace spyre
