// Which cores an engine's intra-op (OpenMP) threads run on (docs/tensors.md,
// "Engine threads on cores").
#pragma once

namespace spyre {

// On the host, before a kernel is launched: raises ValueError naming a bad
// SPYRE_PIN_ENGINE_TEAMS value (a static's guard load once it parsed).
void checkEngineTeamSetting();

// Called on an engine thread before a CPU kernel runs there. The first time
// the thread computes with N > 1 intra-op threads, each thread of its team is
// pinned to a core of its own (with SPYRE_PIN_ENGINE_TEAMS=1, one-thread
// teams too). By default a team whose threads wait for their cores is
// released to the scheduler and pinned again later; that check costs a clock
// read per kernel and a schedstat read per team thread per window of at
// least 25 ms.
void placeEngineTeam();

}  // namespace spyre
