// The thread mode key's registration and fallback (thread_mode.h).
#include "launch/thread_mode.h"

#include <array>
#include <atomic>

#include <torch/library.h>

namespace spyre {
namespace {

std::atomic<bool> owned{false};

// Zero-initialized before any static initializer runs: users plug in from
// theirs in any order.
constinit std::array<std::atomic<ThreadModeHandler>, kThreadModeUsers> handlers{};

// Every operation of a thread that includes the key comes here first.
void onThreadMode(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                  torch::jit::Stack* stack) {
  for (const auto& slot : handlers) {
    const ThreadModeHandler handler = slot.load(std::memory_order_relaxed);
    if (handler != nullptr && handler(op, keys, stack)) return;
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kThreadModeKey),
                     stack);
}

// "registered at <file>:<line>" of the op's kernel for the key, from its
// dump: the dispatcher keeps no other record of who registered a kernel.
std::string registrant(const c10::OperatorHandle& op) {
  const std::string state = op.dumpState();
  const std::string line = "\n" + std::string(c10::toString(kThreadModeKey)) + ": registered at ";
  const size_t at = state.find(line);
  if (at == std::string::npos) return "an unknown place";
  const size_t begin = at + line.size();
  const size_t end = state.find_first_of(" \n", begin);
  return state.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

std::string otherRegistrant() {
  auto& dispatcher = c10::Dispatcher::singleton();
  const std::string key = c10::toString(kThreadModeKey);
  if (dispatcher.hasBackendFallbackForDispatchKey(kThreadModeKey)) {
    return "another library registered a fallback for dispatch key " + key;
  }
  const std::vector<c10::OperatorName> ops = dispatcher.getAllOpNamesForDispatchKey(kThreadModeKey);
  if (ops.empty()) return "";
  const auto op = dispatcher.findOp(ops.front());
  std::string where = op.has_value() ? registrant(*op) : "an unknown place";
  std::string message = "another library registered a kernel for " + c10::toString(ops.front()) +
                        " on dispatch key " + key + " (registered at " + where + ")";
  if (ops.size() > 1) message += " and " + std::to_string(ops.size() - 1) + " more ops";
  return message;
}

}  // namespace

std::string registerThreadModeKey() {
  static const std::string outcome = [] {
    std::string other = otherRegistrant();
    if (!other.empty()) {
      return "spyre: " + other + ", which spyre borrows as its thread mode key; spyre leaves the "
             "key alone: metadata inference uses torch's (Python) Meta kernels and the stream "
             "sanitizer does not check the host side of copies";
    }
    // Kept for the process: the registration lives as long as the library.
    auto* library = new torch::Library(torch::Library::IMPL, "_", kThreadModeKey, __FILE__, __LINE__);
    library->fallback(torch::CppFunction::makeFromBoxedFunction<&onThreadMode>());
    owned = true;
    return std::string();
  }();
  return outcome;
}

void plugIntoThreadMode(ThreadModeUser user, ThreadModeHandler handler) {
  handlers[static_cast<size_t>(user)].store(handler, std::memory_order_relaxed);
}

bool threadModeKeyOwned() { return owned.load(std::memory_order_relaxed); }

}  // namespace spyre
