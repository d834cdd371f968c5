// The allocators' side of fork() (device/fork_gate.cpp): each allocator
// locks its pools before fork() and unlocks them after, in parent and child.
// Internal to csrc/device.
#pragma once

namespace spyre::fork_gate {

void lockDeviceAllocator();
void unlockDeviceAllocator();  // parent and child alike

void lockHostAllocator();
void unlockHostAllocatorInParent();
void resetHostAllocatorInChild();

}  // namespace spyre::fork_gate
