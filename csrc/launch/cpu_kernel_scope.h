// How a CPU kernel runs on behalf of spyre: below autograd, without Python
// modes, with the intra-op thread count the launch gave, on the host or on an
// engine (whose OpenMP team is placed on cores, launch/engine_team.h).
#pragma once

#include <c10/core/impl/LocalDispatchKeySet.h>

namespace spyre {

// Where a CPU kernel run on behalf of spyre runs: on the calling (host)
// thread, or on an engine (whose team is then placed on cores, engine_team.h).
enum class KernelSide { Host, Engine };

// Dispatch state for CPU kernels run on behalf of spyre: below autograd,
// without Python modes, with `num_threads` intra-op threads (kernelThreads();
// 0 keeps the thread's own). On the host the thread gets its own count back
// at the scope's end. On an engine, `may_fork` says whether the kernel may
// fork the engine's team (engine_team.h, mayForkTeam()).
class CpuKernelScope {
 public:
  explicit CpuKernelScope(int num_threads, KernelSide side = KernelSide::Host,
                          bool may_fork = true);
  ~CpuKernelScope();

 private:
  c10::impl::ExcludeDispatchKeyGuard exclude_;
  int restore_threads_ = 0;  // the host thread's own count, when changed
};

}  // namespace spyre
