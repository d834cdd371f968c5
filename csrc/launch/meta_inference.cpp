// C++ meta kernels for metadata inference (meta_inference.h).
//
// How the Meta dispatches are routed: callMeta includes the thread mode key
// (thread_mode.h), which no tensor carries and no op has a kernel for, in the
// thread-local dispatch state while the op runs on meta tensors. Every
// dispatch of the op, and of the ops its composite kernel calls, reaches the
// key's fallback first, which sends it to routeMeta while routingMeta() holds.
#include "launch/meta_inference.h"
#include "launch/meta_rules.h"
#include "launch/thread_mode.h"

#include <optional>
#include <unordered_map>

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace spyre {
namespace {

thread_local bool routing = false;

using Table = std::unordered_map<c10::OperatorName, c10::KernelFunction>;

const Table& cppMetaKernels() {
  static const Table* table = [] {
    auto* t = new Table();
    auto add = [t](const char* name, const char* overload, c10::KernelFunction kernel) {
      t->emplace(c10::OperatorName(name, overload), std::move(kernel));
    };
    // The ops struct's schema type picks the at::meta overload.
#define META_KERNEL(ops, fn)                                 \
  add(at::_ops::ops::name, at::_ops::ops::overload_name,     \
      c10::KernelFunction::makeFromUnboxedRuntimeFunction(   \
          static_cast<at::_ops::ops::schema*>(&at::meta::fn)));
#include "launch/meta_kernels.inc"
#undef META_KERNEL
    addMetaRules(add);  // written here for ops with no C++ meta kernel (meta_rules.h)
    return t;
  }();
  return *table;
}

// Whether the op's Meta kernel is a Python one: the dispatcher keeps no other
// record of where a kernel comes from than its registration's debug string.
bool hasPythonMeta(const c10::OperatorHandle& op) {
  const std::string state = op.dumpState();
  const size_t at = state.find("\nMeta: registered at ");
  if (at == std::string::npos) return false;
  const size_t end = state.find(':', at + 21);
  return end != std::string::npos && state.compare(end - 3, 3, ".py") == 0;
}

struct Route {
  const c10::KernelFunction* kernel = nullptr;  // a C++ meta kernel
  // else the alias key of its composite kernel, if it has one
  std::optional<c10::DispatchKey> composite;
};

Route routeFor(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<c10::OperatorName, Route>();
  std::lock_guard<std::mutex> lock(mutex);
  auto found = cache->find(op.operator_name());
  if (found != cache->end()) return found->second;
  Route route;
  const Table& table = cppMetaKernels();
  auto kernel = table.find(op.operator_name());
  if (kernel != table.end()) {
    route.kernel = &kernel->second;
  } else if (hasPythonMeta(op)) {
    // The dispatcher's precedence: a NonFunctional kernel wins.
    for (const auto key : {c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
                           c10::DispatchKey::CompositeExplicitAutograd}) {
      if (op.hasKernelForDispatchKey(key)) {
        route.composite = key;
        break;
      }
    }
  }
  cache->emplace(op.operator_name(), route);
  return route;
}

}  // namespace

bool routingMeta() { return routing; }

namespace {
// Meta dispatches of callMeta go to routeMeta; any other is not inference's.
const bool plugged = [] {
  plugIntoThreadMode(ThreadModeUser::MetaInference,
                     [](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack) {
                       if (!routing) return false;
                       routeMeta(op, keys, stack);
                       return true;
                     });
  return true;
}();
}  // namespace

void routeMeta(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKeySet below =
      keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kThreadModeKey);
  const Route route = routeFor(op);
  if (route.kernel != nullptr) {
    route.kernel->callBoxed(op, below, stack);
  } else if (route.composite.has_value()) {
    // The kernel registered for the alias key itself (public dispatcher API).
    op.callBoxedForDispatchKey(*route.composite, *stack);
  } else {
    op.redispatchBoxed(below, stack);  // the Meta kernel: C++, or Python when it is the only one
  }
}

void callMeta(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  if (!threadModeKeyOwned()) {  // another library's key (thread_mode.h): torch's Meta kernels
    op.callBoxed(stack);
    return;
  }
  // Included even where the sanitizer's host check excluded it for the
  // operations an op calls (a spyre op called with host bytes pending).
  const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  const c10::impl::ForceDispatchKeyGuard mode(local.included_.add(kThreadModeKey),
                                              local.excluded_.remove(kThreadModeKey));
  const struct Routing {
    const bool outer = routing;
    Routing() { routing = true; }
    ~Routing() { routing = outer; }
  } on;
  op.callBoxed(stack);
}

}  // namespace spyre
