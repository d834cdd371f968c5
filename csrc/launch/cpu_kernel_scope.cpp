#include "launch/cpu_kernel_scope.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include "launch/engine_team.h"
#include "launch/openmp.h"

namespace spyre {

CpuKernelScope::CpuKernelScope(int num_threads, KernelSide side, bool may_fork)
    : exclude_(c10::autograd_dispatch_keyset_with_ADInplaceOrView | c10::python_ks) {
  // The count the launch gave (kernelThreads()). ATen sets a thread's count
  // (OpenMP's and MKL's) from the process's default at the thread's first
  // parallel call, which at::get_num_threads() makes now rather than inside
  // the kernel. An engine takes the count for good, as torch.set_num_threads
  // sets it (MKL's too); a host thread gets its own OpenMP count back after.
  if (num_threads > 0) {
    const int own = at::get_num_threads();
    if (own != num_threads) {
      if (side == KernelSide::Engine) {
        at::set_num_threads(num_threads);
      } else {
        omp_set_num_threads(num_threads);
        restore_threads_ = own;
      }
    }
  }
  if (side == KernelSide::Engine) {
    placeEngineTeam(may_fork);
    // Record functions stay off on an engine thread, for good: profiler
    // callbacks may be Python, which an engine never runs, and switching them
    // per op rebuilds the thread's callback cache (docs/performance.md, "Why
    // the code is as it is").
    if (at::isRecordFunctionEnabled()) at::enableRecordFunction(false);
  }
}

CpuKernelScope::~CpuKernelScope() {
  if (restore_threads_ > 0) omp_set_num_threads(restore_threads_);
}

}  // namespace spyre
