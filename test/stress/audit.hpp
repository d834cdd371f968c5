// Lock audit for the stress programs (linked with -Wl,--wrap, see audit.cpp).
//
// Every runtime entry point torch-spyre calls is wrapped: the wrapper asks the
// pool (built with -DSPYRE_LOCK_AUDIT) whether the calling thread holds the
// pool lock, and counts a violation if it does. A runtime call can block
// (stream creation, synchronize, allocation), so none may run under the lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace audit {

// Runtime calls seen, and those made while holding the pool lock.
uint64_t calls();
uint64_t violations();
// "<call> under <shared|unique> pool lock" for the first violation, or "".
std::string firstViolation();

// Test hooks for createStream (lock_hold): sleep `delay` inside every
// creation, and run `hook` (once, in the creating thread) while the first
// creation is in progress.
void setSlowCreate(std::chrono::milliseconds delay);
void setCreateHook(std::function<void()> hook);
uint64_t creations();
// Odd while a creation is in progress: bumped on entry to and exit from
// every createStream. An operation that starts and ends on the same odd value
// ran entirely inside one creation.
uint64_t creationSeq();

}  // namespace audit
