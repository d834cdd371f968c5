// The dispatch key spyre includes in a thread's dispatch state to see every
// operation the thread dispatches (docs/tensors.md, "The thread mode key"):
// metadata inference routes Meta dispatches through it (launch/meta_inference.h)
// and the stream sanitizer checks CPU operations against the pending host side
// of copies through it (launch/sanitizer_host.h). One key, one boxed fallback.
//
// Why a borrowed key: torch 2.13 has no mode key an out-of-tree backend owns.
// Its per-backend keys (AutogradPrivateUse1, QuantizedPrivateUse1, ...) carry
// the PrivateUse1 backend bit, and the dispatcher pairs the highest
// functionality with the highest backend bit of the whole set: included for
// CPU tensors they would reach spyre's own kernels, for meta tensors Meta's
// (not the fallback). AutocastPrivateUse1 is spyre's autocast, PrivateUse2/3
// belong to other backends, and a Python TorchDispatchMode costs a Python
// call per op. So spyre borrows TESTING_ONLY_GenericMode, which torch uses
// only in its own C++ tests, and registers its fallback at import only after
// checking that no other library registered a kernel or a fallback on it.
// The upstream change that would retire it: a mode key per custom backend
// (e.g. a "ModePrivateUse1" functionality key) or a C++ dispatch mode API.
#pragma once

#include <string>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/DispatchKey.h>

namespace spyre {

constexpr c10::DispatchKey kThreadModeKey = c10::DispatchKey::TESTING_ONLY_GenericMode;

// The users of the key, in the order the fallback asks them.
enum class ThreadModeUser { MetaInference, HostSanitizer };
constexpr int kThreadModeUsers = 2;

// A user's handler: false when the operation is not its own (the next user is
// asked; when nobody takes it, it runs below the key).
using ThreadModeHandler = bool (*)(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                                   torch::jit::Stack* stack);

// Plugs `handler` in as `user`'s (at static initialization: one per user).
void plugIntoThreadMode(ThreadModeUser user, ThreadModeHandler handler);

// Registers the key's fallback, once, if no other library registered a kernel
// or a fallback on the key. Returns "" then, else why the key is not spyre's
// (the key, the op and its registrant): metadata inference then uses torch's
// Meta kernels and the sanitizer does not check the host side of copies.
std::string registerThreadModeKey();

// Whether registerThreadModeKey registered the fallback.
bool threadModeKeyOwned();

}  // namespace spyre
