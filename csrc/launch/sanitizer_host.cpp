// The host side of copies (sanitizer_host.h).
//
// How CPU operations are seen: the thread mode key (thread_mode.h), which no
// tensor carries, is put in the thread-local included set of a thread when it
// launches a non_blocking copy with a pinned host side, and the key's boxed
// fallback (checkCpuOperation) checks each operation's CPU tensors against the
// pending host bytes. The key stays off every other thread and off every thread once no
// host bytes are pending (the fallback takes it out on its first call then):
// without a pending copy, CPU operations pay nothing, and nothing at all runs
// while the sanitizer is off. A Python TorchDispatchMode (as CSAN) would
// cost a Python call per operation while on.
#include "launch/sanitizer_host.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "launch/sanitizer_accesses.h"
#include "launch/thread_mode.h"
#include "device/allocator.h"

namespace spyre::sanitizer {
namespace {

bool tracksHost() {
  const Mode m = mode();
  return m == Mode::Raise || m == Mode::Warn;
}

// A plain CPU tensor: not a fake, functional or subclass one (no data pointer
// to read, or one that is not the memory's).
void addHostTensor(std::vector<Access>& out, const at::Tensor& t, bool write) {
  if (!t.defined() || !t.is_cpu() || t.numel() == 0 || t.key_set().has_any(c10::python_ks) ||
      !t.has_storage() || !t.storage().device().is_cpu() || t.storage().data() == nullptr) {
    return;
  }
  const size_t first = out.size();
  addTensorBytes(out, t, write);
  for (size_t i = first; i < out.size(); ++i) {
    out[i].host = true;
    out[i].bytes.what = "host " + out[i].bytes.what;
  }
}

// Ops that take a tensor without reading its elements.
bool readsNoElements(const c10::OperatorName& name) {
  const std::string& n = name.name;
  return (n.size() > 5 && n.compare(n.size() - 5, 5, "_like") == 0) ||  // empty_like, zeros_like
         n == "aten::is_pinned" || n == "aten::record_stream" || n == "aten::is_same_size" ||
         n == "aten::new_empty" || n == "aten::new_empty_strided" || n == "aten::new_zeros" ||
         n == "aten::new_ones" || n == "aten::new_full" || n == "aten::set_" ||
         n == "aten::_has_same_storage_numel" || n == "aten::_has_compatible_shallow_copy_type";
}

void addArgument(std::vector<Access>& out, const c10::IValue& v, bool write) {
  if (v.isTensor()) {
    addHostTensor(out, v.toTensor(), write);
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) addHostTensor(out, t, write);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) addHostTensor(out, e.toTensor(), write);
    }
  }
}

}  // namespace

void checkCpuOperation(const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                       torch::jit::Stack* stack) {
  // The operations it calls are part of it: checked once, here.
  const c10::impl::ExcludeDispatchKeyGuard inner(kThreadModeKey);
  if (!hostPending()) {
    c10::impl::tls_set_dispatch_key_included(kThreadModeKey, false);
  } else if (!keys.has_backend(c10::BackendComponent::PrivateUse1Bit) &&
             !readsNoElements(op.operator_name())) {
    // A spyre operation's host bytes are its copies', seen at their launch.
    const auto& params = op.schema().arguments();
    const size_t n = std::min(params.size(), stack->size());
    const auto args = torch::jit::last(*stack, n);
    std::vector<Access> accesses;
    for (size_t i = 0; i < n; ++i) {
      const c10::AliasInfo* alias = params[i].alias_info();
      if (alias != nullptr && !alias->isWrite()) continue;  // a view of it: not an access
      addArgument(accesses, args[i], alias != nullptr);
    }
    if (!accesses.empty()) onHostAccess(opName(op), accesses);
  }
  op.redispatchBoxed(keys & c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, kThreadModeKey),
                     stack);
}

namespace {
// Every operation inference does not take: a CPU operation the host may run
// on bytes a copy has pending.
const bool plugged = [] {
  plugIntoThreadMode(ThreadModeUser::HostSanitizer,
                     [](const c10::OperatorHandle& op, c10::DispatchKeySet keys,
                        torch::jit::Stack* stack) {
                       checkCpuOperation(op, keys, stack);
                       return true;
                     });
  return true;
}();
}  // namespace

void addPendingHostSide(std::vector<Access>& out, const at::Tensor& src, const at::Tensor& dst) {
  if (!tracksHost() || src.is_cpu() == dst.is_cpu()) return;
  const at::Tensor& host = src.is_cpu() ? src : dst;
  if (!isPinnedPtr(host.storage().data())) return;  // pageable: the caller waits
  addHostTensor(out, host, /*write=*/dst.is_cpu());
  // Without the key (another library's, thread_mode.h) CPU operations go unchecked.
  if (threadModeKeyOwned()) c10::impl::tls_set_dispatch_key_included(kThreadModeKey, true);
}

void checkHostTensor(const at::Tensor& t, const std::string& op, bool write) {
  if (!hostPending()) return;
  std::vector<Access> accesses;
  addHostTensor(accesses, t, write);
  onHostAccess(op, accesses);
}

}  // namespace spyre::sanitizer
