#include "launch/sync_path.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>

#include "launch/argument_writes.h"
#include "launch/kernel_threads.h"
#include "launch/launch.h"
#include "launch/op_arguments.h"
#include "launch/plan.h"
#include "launch/sanitizer_accesses.h"
#include "launch/stream_copy.h"
#include "launch/stream_uses.h"
#include "device/generator.h"
#include "runtime/capture.h"
#include "runtime/stream.h"
#include "runtime/sync_debug.h"

namespace spyre::launch {
namespace {

// target <- host, queued on `stream` behind the work already queued there:
// the contract of sync_path.h. The bytes travel in a fresh host buffer of the
// target's layout that the copy keeps alive (it never reaches Python), so the
// caller does not wait for the copy.
// `op`: the op the stream sanitizer names for the write (nullptr: "H2D").
void queueHostWrite(const SpyreStream& stream, const at::Tensor& host, const at::Tensor& target,
                    const char* op = nullptr) {
  if (target.numel() == 0) return;
  at::Tensor staged =
      at::empty_strided(target.sizes(), target.strides(), target.options().device(c10::kCPU));
  staged.copy_(host);
  launchCopy(stream, staged, target, [staged] {}, /*non_blocking=*/false, op);
}

// An out= argument's host tensor into its device tensor: the target takes the
// sizes and strides the kernel gave the host tensor (it resized it as CPU
// resizes an out=, or kept it), then the values, in stream order.
void writeOut(const SpyreStream& stream, const at::Tensor& host, const at::Tensor& target,
              const char* op) {
  Layout layout = Layout::of(host);
  layout.offset = target.storage_offset();
  restride(target, layout);  // a growth copies the old bytes in stream order
  queueHostWrite(stream, host, target, op);  // after that copy, not under it
}

// A spyre tensor holding a host result of the synchronous path.
at::Tensor spyreCopyOf(const at::Tensor& host, const SpyreStream& stream, const char* op) {
  Layout layout = Layout::of(host);
  layout.offset = 0;
  if (!host.is_non_overlapping_and_dense()) {
    int64_t stride = 1;
    for (size_t d = layout.sizes.size(); d-- > 0;) {
      layout.strides[d] = stride;
      stride *= std::max<int64_t>(layout.sizes[d], 1);
    }
  }
  at::Tensor out = emptySpyre(layout, checkDevice(stream.device_index()));
  queueHostWrite(stream, host, out, op);
  return out;
}

// The host copies of the spyre tensors an op reads: one host buffer per
// device storage, laid out as the storage is (so views, aliasing and offsets
// mean the same on both sides), filled by device-to-host copies queued on the
// stream. The host never reads device memory: the copies do, in stream order.
struct HostCopies {
  std::string op;  // as the stream sanitizer names the op's reads
  std::unordered_map<const void*, at::Tensor> buffers;  // device storage -> host bytes

  // A CPU tensor of `t`'s layout over the host copy of its storage; the bytes
  // `t` spans are queued to arrive there on `stream`.
  at::Tensor of(const at::Tensor& t, const SpyreStream& stream) {
    const c10::Storage& storage = t.storage();
    auto [it, fresh] = buffers.try_emplace(storage.data(), at::Tensor());
    if (fresh) {
      it->second = at::empty({static_cast<int64_t>(storage.nbytes())},
                             at::TensorOptions().dtype(at::kByte));
    }
    // A view of the host buffer's own storage: tensors that share a device
    // storage share a host storage, so the kernel's overlap checks (an out=
    // argument that is an input) see what CPU's see.
    at::Tensor host = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(it->second.storage()), c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    host.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    host._set_conj(t.is_conj());
    host._set_neg(t.is_neg());
    if (t.numel() > 0) {
      // The bytes the tensor spans, whatever its strides (expanded and
      // overlapping views included): one copy.
      int64_t last = t.storage_offset();
      for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
      const size_t begin = t.storage_offset() * t.element_size();
      const size_t end = (last + 1) * t.element_size();
      auto launch = [&] {
        stream.launchD2H(static_cast<const char*>(storage.data()) + begin,
                         static_cast<char*>(it->second.data_ptr()) + begin, end - begin);
      };
      if (sanitizer::accessesWanted()) {
        std::vector<sanitizer::Access> accesses;
        sanitizer::addTensor(accesses, t, /*write=*/false);
        sanitizer::onLaunch(stream.id(), op, accesses, launch);
      } else {
        launch();
      }
      recordUse(t, stream);
    }
    return host;
  }

  // The host storage standing for `t`'s device storage (nullptr: none).
  const void* hostStorageOf(const at::Tensor& t) const {
    auto it = buffers.find(t.storage().data());
    return it == buffers.end() ? nullptr : it->second.data_ptr();
  }
};

// The device storages of a call's spyre tensors, one entry per tensor.
using Storages = c10::SmallVector<const void*, 8>;

c10::IValue hostArgument(const c10::Argument& argument, const c10::IValue& v, HostCopies& copies,
                         const SpyreStream& stream, const Storages& storages) {
  auto host = [&](const at::Tensor& t) -> at::Tensor {
    if (!isSpyre(t)) return t;
    // An out= tensor is handed to the kernel as a host tensor of its sizes and
    // strides, so that ATen's out= rules apply as on CPU: resized only when
    // the sizes differ, strides kept otherwise. One that shares its storage
    // with another argument is a view of that storage's host copy, so that
    // the kernel's overlap checks see what CPU's see.
    if (argument.is_out()) {
      if (t.storage().data() != nullptr &&
          std::count(storages.begin(), storages.end(), t.storage().data()) > 1) {
        return copies.of(t, stream);
      }
      return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
    }
    return copies.of(t, stream);
  };
  if (v.isTensor()) return host(v.toTensor());
  if (v.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : v.toTensorList()) list.push_back(host(t));
    return list;
  }
  if (v.isList() && holdsTensors(v)) {
    c10::List<std::optional<at::Tensor>> list;
    for (const c10::IValue& e : v.toListRef()) {
      list.push_back(e.isTensor() ? std::optional<at::Tensor>(host(e.toTensor())) : std::nullopt);
    }
    return list;
  }
  if (v.isDevice() && v.toDevice().is_privateuseone()) return c10::Device(c10::kCPU);
  if (v.isGenerator() && v.toGenerator().device().is_privateuseone()) {
    return cpuGeneratorOf(v.toGenerator(), v.toGenerator().device().index());
  }
  if (v.isNone()) {
    const auto* optional = argument.type()->castRaw<c10::OptionalType>();
    if (optional != nullptr && optional->getElementType()->kind() == c10::TypeKind::GeneratorType) {
      return cpuGeneratorOf(std::nullopt, -1);  // random ops draw from spyre's generator
    }
  }
  return v;
}

// A host result as the spyre value the op returns: the argument it is (out=
// arguments receive the result), a view of the argument it aliases, or a new
// spyre tensor.
at::Tensor spyreResult(const c10::Argument& ret, int arg, const at::Tensor& result,
                       const Stack& args, const c10::FunctionSchema& schema,
                       const SpyreStream& stream, const HostCopies& copies) {
  if (!result.defined() || !result.is_cpu()) return result;
  const char* op = copies.op.empty() ? nullptr : copies.op.c_str();  // the sanitizer's name
  if (arg >= 0 && args[arg].isTensor() && isSpyre(args[arg].toTensor())) {
    const at::Tensor& target = args[arg].toTensor();
    const bool aliases = result.has_storage() && target.has_storage() &&
                         result.storage().data() == copies.hostStorageOf(target);
    if (!ret.alias_info()->isWrite() && !aliases) return spyreCopyOf(result, stream, op);
    if (ret.alias_info()->isWrite()) {
      if (schema.arguments()[arg].is_out()) writeOut(stream, result, target, op);
      return target;  // an in-place write: copied back with the written arguments
    }
    return viewOf(target, Layout::of(result));
  }
  return spyreCopyOf(result, stream, op);
}

// Whether the op writes argument `i` in place, to be copied back
// (launch/argument_writes.h).
bool writesArgument(const c10::FunctionSchema& schema, const Stack& args, size_t i) {
  if (schema.arguments()[i].is_out()) return false;  // a fresh host tensor: returned, not copied back
  return writesInPlace(schema, args, i);
}

}  // namespace

void runSynchronously(const c10::OperatorHandle& op, Stack* stack, size_t first,
                      CheckedDevice device) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& arguments = schema.arguments();
  Stack args(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  // An implicit wait (sync debug mode), flagged before anything happens.
  checkImplicitSync(schema.name().c_str());
  const SpyreStream stream = getCurrentStream(device);
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(
        stream.id(), schema.name() + (op.hasTag(at::Tag::nondeterministic_seeded)
                                          ? " (a random op: it draws on the host at the call, so "
                                            "every replay would repeat the same numbers)"
                                          : " (it runs at the call: the host waits for the stream "
                                            "and reads its arguments)"));
  }
  HostCopies copies;
  if (sanitizer::accessesWanted()) copies.op = sanitizer::opName(op);
  Storages storages;
  for (const c10::IValue& v : args) {
    forEachTensor(v, [&](const at::Tensor& t) {
      // Empty storages (no memory, a null address) share nothing.
      if (isSpyre(t) && t.storage().data() != nullptr) storages.push_back(t.storage().data());
    });
  }
  Stack host;
  host.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    host.push_back(hostArgument(arguments[i], args[i], copies, stream, storages));
  }
  stream.synchronize();  // the arguments' copies have arrived
  // The host copies of the arguments the op writes in place, before the
  // kernel's results replace them on the stack.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (host copy, spyre tensor)
  for (size_t i = 0; i < args.size(); ++i) {
    if (!writesArgument(schema, args, i)) continue;
    if (args[i].isTensor() && isSpyre(args[i].toTensor())) {
      written.emplace_back(host[i].toTensor(), args[i].toTensor());
    } else if (args[i].isTensorList()) {
      const auto hosts = host[i].toTensorList();
      const auto spyres = args[i].toTensorList();
      for (size_t j = 0; j < spyres.size(); ++j) {
        if (isSpyre(spyres[j])) written.emplace_back(hosts[j], spyres[j]);
      }
    }
  }
  // out= arguments no return stands for (an op returning (), a Tensor[] out):
  // written back like the returned ones.
  std::vector<std::pair<at::Tensor, at::Tensor>> unreturned;  // (host tensor, spyre tensor)
  for (size_t i = 0; i < args.size(); ++i) {
    if (!arguments[i].is_out()) continue;
    const auto& rets = schema.returns();
    const bool returned = std::any_of(rets.begin(), rets.end(), [&](const c10::Argument& r) {
      return aliasedArgument(schema, r) == static_cast<int>(i);
    });
    if (returned) continue;
    std::vector<at::Tensor> hosts;
    forEachTensor(host[i], [&](const at::Tensor& t) { hosts.push_back(t); });
    size_t j = 0;
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (isSpyre(t)) unreturned.emplace_back(hosts[j], t);
      ++j;
    });
  }
  {
    CpuKernelScope scope(kernelThreads());
    op.callBoxed(host);
  }
  for (const auto& [result, target] : unreturned) {
    writeOut(stream, result, target, copies.op.empty() ? nullptr : copies.op.c_str());
  }
  // In-place results go back to the device in stream order (the sanitizer and
  // the hazard tracker see the writes).
  for (const auto& [copy, target] : written) {
    queueHostWrite(stream, copy, target, copies.op.empty() ? nullptr : copies.op.c_str());
  }
  const auto& rets = schema.returns();
  std::vector<c10::IValue> returns;
  for (size_t k = 0; k < rets.size(); ++k) {
    const int arg = aliasedArgument(schema, rets[k]);
    c10::IValue& value = host[k];
    if (value.isTensor()) {
      returns.emplace_back(spyreResult(rets[k], arg, value.toTensor(), args, schema, stream, copies));
    } else if (value.isTensorList()) {
      if (arg >= 0 && rets[k].alias_info()->isWrite()) {
        returns.push_back(args[arg]);  // in-place on a list (foreach): written through
        continue;
      }
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList()) {
        list.push_back(arg >= 0 && args[arg].isTensor()
                           ? spyreResult(rets[k], arg, t, args, schema, stream, copies)
                           : spyreCopyOf(t, stream, copies.op.empty() ? nullptr : copies.op.c_str()));
      }
      returns.emplace_back(std::move(list));
    } else {
      returns.push_back(std::move(value));
    }
  }
  replaceArgsWithReturns(stack, arguments.size(), std::move(returns));
}
}  // namespace spyre::launch
