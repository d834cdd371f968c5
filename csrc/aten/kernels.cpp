// ATen kernels for PrivateUse1: factories and views, copies, fills and random
// fills. Every piece of device work runs on the *current stream* of the
// device: copies are DMA (or, for strided / converting copies, a compute
// operation on the device timeline), fills are device fills. Every other op
// takes the launch path (launch/launch.h). Device work captures TensorRefs,
// never tensors (launch/tensor_ref.h: engine threads never touch Python).
#include <functional>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUFunctions.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/as_strided_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "launch/engine_team.h"
#include "launch/launch.h"
#include "launch/sanitizer_accesses.h"
#include "launch/sanitizer_host.h"
#include "launch/stream_copy.h"
#include "launch/stream_uses.h"
#include "launch/tensor_ref.h"
#include "launch/work_cost.h"
#include "device/allocator.h"
#include "device/card_rules.h"
#include "device/dtypes.h"
#include "device/generator.h"
#include "device/numerics.h"
#include "runtime/capture.h"
#include "runtime/card_priced_launch.h"
#include "runtime/runtime.h"
#include "runtime/stream.h"
#include "runtime/sync_debug.h"

namespace spyre {
namespace {

constexpr c10::DispatchKeySet kSpyreKeys(c10::DispatchKey::PrivateUse1);

void checkFactoryArgs(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "spyre tensors must be strided, got layout ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory),
              "pin_memory=True is only valid for CPU tensors, not spyre tensors");
}

c10::Device spyreDevice(std::optional<c10::Device> device) {
  const c10::Device d = c10::device_or_default(device);
  TORCH_CHECK(d.is_privateuseone(), "expected a spyre device, got ", d);
  return c10::Device(c10::DeviceType::PrivateUse1, ensureDevice(d.index()));
}

// A spyre tensor with its storage: PyTorch's strided bytes or, under the
// card's rules, its default stick layout's whole sticks, which a storage shows
// in full (upstream's tests read them in untyped_storage().nbytes()).
at::Tensor emptyOnDevice(c10::IntArrayRef size, std::optional<c10::IntArrayRef> stride,
                         c10::ScalarType dtype) {
  at::detail::check_size_nonnegative(size);
  const size_t itemsize = c10::elementSize(dtype);
  const size_t compact = stride ? at::detail::computeStorageNbytes(size, *stride, itemsize)
                                : at::detail::computeStorageNbytesContiguous(size, itemsize);
  const size_t nbytes = deviceTensorBytes(compact, size, dtype);
  c10::Storage storage(c10::Storage::use_byte_size_t(), nbytes, deviceAllocator(),
                       /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), kSpyreKeys,
                                                          c10::scalarTypeToTypeMeta(dtype));
  if (stride) {
    t.unsafeGetTensorImpl()->set_sizes_and_strides(size, *stride);
  } else if (size.size() != 1 || size[0] != 0) {
    t.unsafeGetTensorImpl()->set_sizes_contiguous(size);
  }
  return t;
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                               std::optional<c10::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  checkFactoryArgs(layout, pin_memory);
  checkSupportedDtype(c10::dtype_or_default(dtype));
  const c10::DeviceGuard guard(spyreDevice(device));
  at::Tensor t = emptyOnDevice(size, std::nullopt, c10::dtype_or_default(dtype));
  if (memory_format.has_value() && *memory_format != c10::MemoryFormat::Contiguous) {
    t.unsafeGetTensorImpl()->empty_tensor_restride(*memory_format);  // as empty_generic
  }
  return t;
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  checkFactoryArgs(layout, pin_memory);
  checkSupportedDtype(c10::dtype_or_default(dtype));
  const c10::DeviceGuard guard(spyreDevice(device));
  return emptyOnDevice(size, stride, c10::dtype_or_default(dtype));
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size,
                      c10::SymIntArrayRef stride, std::optional<c10::SymInt> storage_offset) {
  return at::cpu::as_strided_symint(self, size, stride, std::move(storage_offset));
}

// In-place restriding (squeeze_, t_, transpose_ and the other in-place views
// go through it): metadata only. Through the launch path it would restride a
// host alias and leave the tensor as it was.
const at::Tensor& as_strided_(const at::Tensor& self, c10::SymIntArrayRef size,
                              c10::SymIntArrayRef stride,
                              std::optional<c10::SymInt> storage_offset) {
  return at::native::as_strided__symint(self, size, stride, std::move(storage_offset));
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size,
                         c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size),
                                    C10_AS_INTARRAYREF_SLOW(stride));
}

// These views have CPU-only kernels upstream; through the fallback they would
// silently become copies. Their native implementations only restride.
at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor view_as_complex(const at::Tensor& self) {
  return at::native::view_as_complex(self);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<at::MemoryFormat> memory_format) {
  const c10::IntArrayRef sizes = C10_AS_INTARRAYREF_SLOW(size);
  // Grow the storage first, in stream order (ATen's CPU resize would memcpy
  // device memory on the host), and before the sizes change: an out-of-memory
  // error leaves the tensor as it was.
  const size_t needed_bytes = at::detail::computeStorageNbytesContiguous(
      sizes, self.dtype().itemsize(), self.storage_offset());
  if (needed_bytes > self.storage().nbytes()) {
    // On a card, the new size's stick layout.
    resizeStorageBytes(self.storage(),
                       deviceTensorBytes(needed_bytes, sizes, self.scalar_type()));
  }
  return at::native::resize_(self, sizes, memory_format);
}

at::Tensor& set_source_Tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& set_source_Storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, std::move(source));
}

at::Tensor& set_source_Storage_storage_offset(at::Tensor& self, at::Storage source,
                                              c10::SymInt storage_offset,
                                              c10::SymIntArrayRef size,
                                              c10::SymIntArrayRef stride) {
  return at::cpu::set_(self, std::move(source), storage_offset.expect_int(),
                       C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

bool isDmaCompatible(const at::Tensor& src, const at::Tensor& dst) {
  return src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() &&
         !src.is_conj() && !dst.is_conj() && !src.is_neg() && !dst.is_neg();
}

}  // namespace

bool launchCopy(const SpyreStream& stream, const at::Tensor& src, const at::Tensor& dst,
                std::function<void()> keep_alive, bool non_blocking, const char* op) {
  const size_t nbytes = dst.numel() * dst.element_size();
  bool host_recorded = false;
  if (nbytes == 0) {
    return true;
  }
  if (src.is_cpu() || dst.is_cpu()) {
    const at::Tensor& host = src.is_cpu() ? src : dst;
    host_recorded = recordPinnedUse(host.storage().data_ptr(), stream);
  }
  // Under the card's rules an int64 spyre tensor holds int32 values: what the
  // host or another dtype copies into it is narrowed (card_rules.h).
  const bool narrow = dst.scalar_type() == c10::kLong && !dst.is_cpu() &&
                      (src.is_cpu() || src.scalar_type() != c10::kLong) && cardRules();
  // Under DLFloat16 numerics what the host or another dtype writes into a
  // float16 or bfloat16 spyre tensor is rounded; a same-dtype device copy
  // moves values already rounded (device/numerics.h).
  const bool to_dl16 = C10_UNLIKELY(dl16Writes()) && !dst.is_cpu() &&
                       isDl16Dtype(dst.scalar_type()) &&
                       (src.is_cpu() || src.scalar_type() != dst.scalar_type());
  const bool dma = !narrow && !to_dl16 && isDmaCompatible(src, dst);
  std::optional<flex::WorkCost> cost;
  if (!dma) {
    // Strided and/or converting copy: ATen's CPU copy on the device timeline.
    // The first copy of each dtype pair is tried on the host first: a pair CPU
    // cannot convert raises here instead of failing the stream.
    const c10::ScalarType from_type = src.scalar_type();
    const c10::ScalarType to_type = dst.scalar_type();
    verifySignature(std::string("copy|") + c10::toString(from_type) + "->" +
                        c10::toString(to_type) + (narrow ? "|int32" : "") +
                        (to_dl16 ? "|dl16" : ""),
                    [&] {
                      const CpuKernelScope scope(0);
                      at::empty({1}, at::TensorOptions().dtype(to_type))
                          .copy_(at::zeros({1}, at::TensorOptions().dtype(from_type)));
                    });
    if (C10_UNLIKELY(launch::cardTiming())) cost = launch::copyCost(src, dst);
  }
  auto launch = [&] {
    if (!dma) {
      auto copy = [from = TensorRef::of(src), to = TensorRef::of(dst),
                   keep_alive = std::move(keep_alive), narrow, to_dl16,
                   op = std::string(to_dl16 ? (op != nullptr ? op : "aten::copy_") : ""),
                   may_fork = mayForkTeam(dst.numel(), false)] {
        const CpuKernelScope scope(0, KernelSide::Engine, may_fork);
        if (narrow) {
          // As CPU converts to int64, then int64 -> int32 -> int64: the low
          // 32 bits, sign-extended (CPU's int32 conversion is that C cast).
          to.cpuAlias().copy_(from.cpuAlias().to(at::kLong).to(at::kInt));
        } else {
          to.cpuAlias().copy_(from.cpuAlias());
        }
        if (to_dl16) {
          const int64_t overflowed = roundToDl16(to.cpuAlias());
          if (overflowed != 0) recordOverflow(op, overflowed);
        }
      };
      if (C10_UNLIKELY(cost.has_value())) {
        launchComputeWithCost(stream, checkDevice(stream.device_index()), std::move(copy), "copy",
                              nbytes, *cost);
      } else {
        stream.launchCompute(std::move(copy), "copy", nbytes);
      }
    } else if (src.is_cpu()) {
      stream.launchH2D(src.const_data_ptr(), dst.data_ptr(), nbytes, std::move(keep_alive));
    } else if (dst.is_cpu()) {
      stream.launchD2H(src.const_data_ptr(), dst.data_ptr(), nbytes, std::move(keep_alive));
    } else {
      stream.launchD2D(src.const_data_ptr(), dst.data_ptr(), nbytes);
    }
  };
  if (sanitizer::accessesWanted()) {
    std::vector<sanitizer::Access> accesses;
    sanitizer::addTensor(accesses, src, /*write=*/false);
    sanitizer::addTensor(accesses, dst, /*write=*/true);
    if (non_blocking) sanitizer::addPendingHostSide(accesses, src, dst);
    const char* name = op != nullptr ? op : src.is_cpu() ? "H2D" : dst.is_cpu() ? "D2H" : "D2D";
    sanitizer::onLaunch(stream.id(), name, accesses, launch);  // checked with the launch
  } else {
    launch();
  }
  for (const at::Tensor& t : {src, dst}) recordUse(t, stream);
  return host_recorded;
}

namespace {

// `check_sync`: false when the caller checked the implicit wait itself
// (.item(), which names itself in the sync debug message). `what`: how a
// refusal during a capture names the call (nullptr: the copy's direction).
at::Tensor copyTensor(const at::Tensor& self, const at::Tensor& dst, bool non_blocking,
                        bool check_sync, const char* what = nullptr) {
  const bool src_spyre = self.is_privateuseone();
  const bool dst_spyre = dst.is_privateuseone();
  TORCH_CHECK((src_spyre || self.is_cpu()) && (dst_spyre || dst.is_cpu()),
              "spyre copy: cannot copy from ", self.device(), " to ", dst.device(),
              " (spyre copies go between spyre and cpu)");
  TORCH_CHECK(at::is_expandable_to(self.sizes(), dst.sizes()), "spyre copy: source of shape ",
              self.sizes(), " cannot be broadcast to the destination's shape ", dst.sizes());
  const c10::DeviceIndex index = ensureDevice((dst_spyre ? dst : self).device().index());
  if (src_spyre && dst_spyre) {
    ensureDevice(self.device().index());
  }
  if (!(src_spyre && dst_spyre) && cardRules()) {
    // The card's DMA converts only the card's dtypes (card_rules.h).
    checkCardDtype((src_spyre ? dst : self).scalar_type(), "copy to or from a cpu tensor of");
  }
  if (dst.numel() == 0) {
    return dst;
  }
  // The checks CPU's copy_ makes, made here: device work that fails puts its
  // stream in an error state for good.
  at::assert_no_internal_overlap(dst);
  if (src_spyre && dst_spyre) {
    at::assert_no_partial_overlap(dst, self);
  }
  // Device-to-device copies are stream ordered like any device work. A copy
  // that touches pageable host memory completes before returning, as on CUDA;
  // only a non_blocking copy with pinned host memory returns at once (the
  // host allocator keeps its block until the copy ran).
  const bool touches_host = !(src_spyre && dst_spyre);
  // A blocking copy is an implicit wait (CUDA flags it too); checked before
  // anything is queued. A non_blocking one the user asked for is not flagged,
  // even from pageable memory, where it waits as well (as CUDA).
  if (touches_host && !non_blocking && check_sync) {
    checkImplicitSync(src_spyre ? "a blocking copy from spyre to cpu"
                                : "a blocking copy from cpu to spyre");
  }
  const SpyreStream stream = getCurrentStream(index);
  if (C10_UNLIKELY(touches_host && capture::anyCapture())) {
    if (what == nullptr) {
      what = src_spyre ? "a copy from spyre to cpu (.cpu(), .to('cpu'))" : "a copy from cpu to spyre";
    }
    capture::refuseIfCapturing(stream.id(), what);
    // The host will wait for the copy (all but a non_blocking one with pinned
    // memory): refused, if at all, before the copy is queued, never after,
    // when the caller owns its host memory again.
    const at::Tensor& host = src_spyre ? dst : self;
    if (!non_blocking || !isPinnedPtr(host.storage().data_ptr().get())) {
      stream.checkCaptureAllowsHostWait((std::string(what) + " (the host waits for stream id=" +
                            std::to_string(stream.id()) + ")").c_str());
    }
  }
  if (dst_spyre && dst.scalar_type() == c10::kLong &&
      (!src_spyre || self.scalar_type() != c10::kLong) && cardRules()) {
    warnInt64Downcast();  // launchCopy narrows (upstream warns on the copy)
  }
  const at::Tensor src = self.sizes() == dst.sizes() ? self : self.expand(dst.sizes());
  const bool host_recorded = launchCopy(stream, src, dst, {}, non_blocking);
  if (touches_host && !(non_blocking && host_recorded)) {
    stream.synchronizeSkippingCaptureCheck();
  }
  return dst;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  return copyTensor(self, dst, non_blocking, /*check_sync=*/true);
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  resize_(dst, self.sym_sizes(), std::nullopt);
  return copy_from(self, dst, /*non_blocking=*/false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  checkImplicitSync("aten::_local_scalar_dense (.item())");
  if (C10_UNLIKELY(capture::anyCapture())) {
    capture::refuseIfCapturing(getCurrentStream(self.device().index()).id(),
                               "aten::_local_scalar_dense (.item(): the host reads device memory)");
  }
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  copyTensor(self.reshape({}), host, /*non_blocking=*/false, /*check_sync=*/false,
             "aten::_local_scalar_dense (.item(): the host reads device memory)");
  return at::native::_local_scalar_dense_cpu(host);
}

// The runtime's device fill for a dtype, and the value a CPU fill_ would store
// as the double that fill takes. nullopt when the dtype has no device fill or
// the double would not be exact (int64 beyond 2^53).
std::optional<std::pair<flex::DataFormats, double>> deviceFill(c10::ScalarType type,
                                                                const at::Scalar& value) {
  switch (type) {
    case c10::kFloat: return {{flex::DataFormats::FP32, value.to<float>()}};
    case c10::kHalf: return {{flex::DataFormats::FP16, value.to<at::Half>()}};
    case c10::kBFloat16: return {{flex::DataFormats::BF16, value.to<at::BFloat16>()}};
    case c10::kChar: return {{flex::DataFormats::INT8, value.to<int8_t>()}};
    case c10::kShort: return {{flex::DataFormats::INT16, value.to<int16_t>()}};
    case c10::kInt: return {{flex::DataFormats::INT32, value.to<int32_t>()}};
    case c10::kByte: return {{flex::DataFormats::BYTES, value.to<uint8_t>()}};
    case c10::kBool: return {{flex::DataFormats::BYTES, value.to<bool>() ? 1.0 : 0.0}};
    case c10::kLong: {
      constexpr int64_t kExactInDouble = int64_t{1} << 53;
      const int64_t element = value.to<int64_t>();
      if (element < -kExactInDouble || element > kExactInDouble) {
        return std::nullopt;
      }
      return {{flex::DataFormats::INT64, static_cast<double>(element)}};
    }
    default: return std::nullopt;
  }
}

// Converts `value` to the element type as CPU's fill_ does, raising here for a
// value that does not fit (device work that fails would poison the stream).
void checkFillValue(c10::ScalarType type, const at::Scalar& value) {
  AT_DISPATCH_V2(type, "fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), AT_EXPAND(AT_FLOAT8_TYPES),
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES), c10::kComplexHalf, c10::kHalf,
                 c10::kBool, c10::kBFloat16);
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& requested) {
  const SpyreStream stream = getCurrentStream(self.device().index());
  checkFillValue(self.scalar_type(), requested);
  at::Scalar value = requested;
  if (self.scalar_type() == c10::kLong && cardRules()) {
    // An int64 tensor holds int32 values on the card: the value is narrowed
    // as a copy would narrow it (a warning only when that changes it).
    value = narrowToInt32(requested.to<int64_t>());
    if (value.to<int64_t>() != requested.to<int64_t>()) warnInt64Downcast();
  }
  bool overflowed = false;
  if (C10_UNLIKELY(dl16Writes())) {
    // DLFloat16 numerics: the fill stores the value rounded (device/numerics.h).
    value = roundedFillValue(self.scalar_type(), value, overflowed);
  }
  const size_t nbytes = self.numel() * self.element_size();
  if (nbytes == 0) {
    return self;
  }
  if (C10_UNLIKELY(overflowed)) recordOverflow("aten::fill_", self.numel());
  const auto fill = self.is_non_overlapping_and_dense() && !self.is_conj() && !self.is_neg()
                        ? deviceFill(self.scalar_type(), value)
                        : std::nullopt;
  if (!fill) {
    verifySignature(std::string("fill|") + c10::toString(self.scalar_type()), [&] {
      const CpuKernelScope scope(0);
      at::empty({1}, at::TensorOptions().dtype(self.scalar_type())).fill_(value);
    });
  }
  auto launch = [&] {
    if (fill) {
      stream.launchFill(self.data_ptr(), nbytes, fill->second, fill->first);
    } else {
      stream.launchCompute(
          [ref = TensorRef::of(self), value, may_fork = mayForkTeam(self.numel(), false)] {
            const CpuKernelScope scope(0, KernelSide::Engine, may_fork);
            ref.cpuAlias().fill_(value);
          },
          "fill", nbytes);
    }
  };
  if (sanitizer::accessesWanted()) {
    std::vector<sanitizer::Access> accesses;
    sanitizer::addTensor(accesses, self, /*write=*/true);
    sanitizer::onLaunch(stream.id(), "aten::fill_.Scalar", accesses, launch);
  } else {
    launch();
  }
  recordUse(self, stream);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  // As ATen's fill_ on any device: a value on self's device is broadcast by a
  // stream-ordered copy (the host never waits for it); only a value on another
  // device (a CPU scalar, or a CPU self here through dispatch) is read.
  if (self.device() != value.device()) {
    const at::Scalar scalar = value.item();
    if (self.is_privateuseone()) return fill_scalar(self, scalar);
    const CpuKernelScope scope(0);
    return self.fill_(scalar);
  }
  copyTensor(self.is_alias_of(value) ? value.clone() : value, self, /*non_blocking=*/false,
             /*check_sync=*/true);
  return self;
}

at::Tensor& zero_(at::Tensor& self) {
  return fill_scalar(self, 0);
}

// Random fills draw from the device generator on the host at launch time (so
// results follow program order, whatever the streams) and reach the device
// with a stream-ordered copy. The host tensor has self's strides: CPU kernels
// choose their algorithm and draw order from the layout, so draws equal CPU's
// (and an overlapping self raises CPU's error here, not on the stream).
template <typename Draw>
at::Tensor& randomFill(at::Tensor& self, const char* op,
                       const std::optional<at::Generator>& generator, Draw draw) {
  const SpyreStream stream = getCurrentStream(self.device().index());
  if (C10_UNLIKELY(capture::anyCapture())) {
    // A replay would write the numbers drawn once, at capture, every time.
    capture::refuseIfCapturing(stream.id(), std::string(op) +
                                                " (a random op: it draws on the host at the call, "
                                                "so every replay would repeat the same numbers)");
  }
  at::Tensor host =
      at::empty_strided(self.sizes(), self.strides(), self.options().device(at::kCPU));
  draw(host, cpuGeneratorOf(generator, self.device().index()));
  // `host` never reaches Python: the copy may drop it on the engine.
  launchCopy(stream, host, self, [host] {}, /*non_blocking=*/false, op);
  return self;
}

at::Tensor& normal_(at::Tensor& self, double mean, double std,
                    std::optional<at::Generator> generator) {
  return randomFill(self, "aten::normal_", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.normal_(mean, std, g); });
}

at::Tensor& uniform_(at::Tensor& self, double from, double to,
                     std::optional<at::Generator> generator) {
  return randomFill(self, "aten::uniform_", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.uniform_(from, to, g); });
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                        std::optional<at::Generator> generator) {
  return randomFill(self, "aten::random_.from", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.random_(from, to, g); });
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return randomFill(self, "aten::random_.to", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.random_(to, g); });
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> generator) {
  return randomFill(self, "aten::random_", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.random_(g); });
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  return randomFill(self, "aten::bernoulli_.float", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.bernoulli_(p, g); });
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> generator) {
  return randomFill(self, "aten::exponential_", generator,
                    [&](at::Tensor& h, const at::Generator& g) { h.exponential_(lambd, g); });
}

// native_dropout has no generator argument: its CPU kernel would draw from
// CPU's generator. The same computation as CPU's, with spyre's generator and
// every step queued on the stream.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const auto mask_options = input.options().dtype(at::kBool);
  if (input.numel() == 0) {
    return {input, at::empty_like(input, mask_options)};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, mask_options)};
  }
  const double p1m = 1. - p;
  const double scale = p1m == 0 ? 0. : 1. / p1m;
  at::Tensor mask = at::empty_like(input, mask_options);
  mask.bernoulli_(p1m);
  return {input.mul(mask).mul_(scale), mask};
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  recordStream(self.storage().data_ptr(), SpyreStream(stream));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("as_strided_", TORCH_FN(as_strided_));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("view_as_real", TORCH_FN(view_as_real));
  m.impl("view_as_complex", TORCH_FN(view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Tensor", TORCH_FN(set_source_Tensor));
  m.impl("set_.source_Storage", TORCH_FN(set_source_Storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_source_Storage_storage_offset));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("random_", TORCH_FN(random_));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_float));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("native_dropout", TORCH_FN(native_dropout));
}

// Quantized dtypes select the QuantizedPrivateUse1 key: refuse them with the
// same TypeError as every unsupported dtype.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
}

// The conjugate and negative fallbacks materialize a conj/neg input with
// clone(), which copies through _copy_from again: endless recursion. Let the
// copy kernels see the bits instead (TensorRef keeps them).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace
}  // namespace spyre
