// Which cores an engine's intra-op (OpenMP) threads run on (docs/tensors.md,
// "Engine threads on cores").
#pragma once

namespace spyre {

// On the host, before a kernel is launched: raises ValueError naming a bad
// SPYRE_PIN_ENGINE_TEAMS value (a static's guard load once it parsed).
void checkEngineTeamSetting();

// Called on an engine thread before a CPU kernel runs there. With
// SPYRE_PIN_ENGINE_TEAMS=1, the first time the thread computes with N
// intra-op threads each thread of its team is pinned to its own core. Later
// calls with the same N cost a thread-local read.
void placeEngineTeam();

}  // namespace spyre
