// fork() and the allocators (device/fork_gate.h), and the stream sanitizer's lock.
#include "device/fork_gate.h"

#include <pthread.h>

#include "runtime/sanitizer.h"

namespace spyre {
namespace {

// fork() with the allocators' locks held, so the child's copies are
// consistent and unlocked: it can free the tensors it inherited. Registered
// after the runtime's own handler (the stub is loaded first), so this prepare
// runs first: a thread holding a pool lock here may be waiting for the
// runtime's memory lock, which the runtime's prepare takes.
// The stream sanitizer's lock last: the device allocator calls into it with
// its pool lock held.
void lockAllocatorsForFork() {
  fork_gate::lockHostAllocator();
  fork_gate::lockDeviceAllocator();
  sanitizer::lockForFork();
}

void unlockAllocatorsInParent() {
  sanitizer::unlockAfterFork();
  fork_gate::unlockDeviceAllocator();
  fork_gate::unlockHostAllocatorInParent();
}

void unlockAllocatorsInChild() {
  sanitizer::unlockAfterFork();
  fork_gate::unlockDeviceAllocator();
  fork_gate::resetHostAllocatorInChild();
}

// Registered when _C is loaded.
const bool registered = [] {
  pthread_atfork(lockAllocatorsForFork, unlockAllocatorsInParent, unlockAllocatorsInChild);
  return true;
}();

}  // namespace
}  // namespace spyre
