// Process-wide runtime state: shutdown at exit and fork detection (lifecycle.cpp).
#pragma once

#include <atomic>
#include <mutex>

namespace flex::detail {

// Set by the shutdown guard at process exit; launches throw afterwards.
extern std::atomic<bool> g_shut_down;
// Set in a child forked from a process that had a context: the parent's engine
// threads do not exist in the child, so the context cannot run anything.
extern std::atomic<bool> g_forked_child;

// Serializes RuntimeContext::create(); held across fork().
std::mutex& contextCreationMutex();

[[noreturn]] void throwForkedChild();
[[noreturn]] void throwShutDown();

inline void checkNotForkedChild() {
  if (g_forked_child.load(std::memory_order_relaxed)) throwForkedChild();
}

}  // namespace flex::detail
