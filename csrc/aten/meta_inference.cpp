// C++ meta kernels for metadata inference (meta_inference.h).
//
// How the Meta dispatches are routed: callMeta includes a dispatch key that
// no tensor carries and that no op has a kernel for (TESTING_ONLY_GenericMode)
// in the thread-local dispatch state while the op runs on meta tensors, and
// registers one boxed fallback for that key. Every dispatch of the op, and of
// the ops its composite kernel calls, reaches the fallback first, which picks
// the C++ kernel; outside callMeta nothing ever reaches it.
#include "aten/meta_inference.h"
#include "aten/meta_rules.h"

#include <unordered_map>

#include <ATen/MetaFunctions.h>
#include <ATen/Operators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace spyre {
namespace {

constexpr c10::DispatchKey kRoute = c10::DispatchKey::TESTING_ONLY_GenericMode;

// A backend key nothing registers for: its dispatch table entries are the
// ops' CompositeExplicitAutograd(NonFunctional) kernels.
constexpr c10::DispatchKey kComposite = c10::DispatchKey::PrivateUse3;

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
#include "aten/meta_kernels.inc"
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
  bool composite = false;                       // else its composite kernel, if it has one
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
    route.composite =
        op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) ||
        op.hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional);
  }
  cache->emplace(op.operator_name(), route);
  return route;
}

void routeMeta(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const c10::DispatchKeySet below = keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kRoute);
  const Route route = routeFor(op);
  if (route.kernel != nullptr) {
    route.kernel->callBoxed(op, below, stack);
  } else if (route.composite) {
    op.redispatchBoxed(c10::DispatchKeySet(kComposite), stack);
  } else {
    op.redispatchBoxed(below, stack);  // the Meta kernel: C++, or Python when it is the only one
  }
}

}  // namespace

void callMeta(const c10::OperatorHandle& op, torch::jit::Stack& stack) {
  const c10::impl::IncludeDispatchKeyGuard route(kRoute);
  op.callBoxed(stack);
}

TORCH_LIBRARY_IMPL(_, TESTING_ONLY_GenericMode, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&routeMeta>());
}

}  // namespace spyre
