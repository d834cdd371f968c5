#include "launch/tensor_ref.h"

#include <cstring>

#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/TypeCast.h>

#include "flex/flex.hpp"

namespace spyre {

TensorRef TensorRef::of(const at::Tensor& t) {
  TensorRef ref;
  ref.capture(t);
  return ref;
}

void TensorRef::capture(const at::Tensor& t) {
  TensorRef& ref = *this;
  ref.dtype = t.scalar_type();
  ref.sizes.assign(t.sizes().begin(), t.sizes().end());
  ref.strides.assign(t.strides().begin(), t.strides().end());
  ref.conj = t.is_conj();
  ref.neg = t.is_neg();
  if (t.is_cpu() && t.dim() == 0) {
    ref.cpu_scalar = true;
    ref.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
    std::memcpy(ref.scalar_bytes.data(), t.const_data_ptr(), t.element_size());
    return;
  }
  const c10::Storage& storage = t.storage();
  ref.storage_base = storage.mutable_data();
  ref.storage_nbytes = storage.nbytes();
  ref.storage_offset = t.storage_offset();
}

at::Tensor TensorRef::cpuAlias() const {
  at::Tensor alias;
  if (cpu_scalar) {
    alias = at::empty({}, at::TensorOptions().dtype(dtype));
    std::memcpy(alias.mutable_data_ptr(), scalar_bytes.data(), alias.element_size());
    alias.unsafeGetTensorImpl()->set_wrapped_number(wrapped_number);
  } else {
    // A storage that does not own its memory (no deleter) and cannot grow, over
    // the executors' view of device memory (pinned host memory as it is).
    c10::Storage storage(c10::Storage::use_byte_size_t(), storage_nbytes,
                         c10::DataPtr(flex::executorAddress(storage_base), c10::Device(c10::kCPU)),
                         /*allocator=*/nullptr, /*resizable=*/false);
    alias = at::detail::make_tensor<c10::TensorImpl>(
        std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU),
        c10::scalarTypeToTypeMeta(dtype));
    alias.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
  }
  alias._set_conj(conj);
  alias._set_neg(neg);
  return alias;
}

bool TensorRef::repoint(at::Tensor& alias) const {
  c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  // A scalar's alias owns its 16 bytes; a tensor's owns nothing (no allocator).
  const bool alias_is_scalar = impl->storage().allocator() != nullptr;
  if (alias_is_scalar != cpu_scalar) return false;
  if (cpu_scalar) {
    if (alias.scalar_type() != dtype) return false;
    std::memcpy(alias.mutable_data_ptr(), scalar_bytes.data(), alias.element_size());
    impl->set_wrapped_number(wrapped_number);
  } else {
    c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(
        c10::DataPtr(flex::executorAddress(storage_base), c10::Device(c10::kCPU)));
    storage->set_nbytes(storage_nbytes);
    if (alias.scalar_type() != dtype) {
      impl->set_storage_and_dtype(impl->storage(), c10::scalarTypeToTypeMeta(dtype));
    }
    impl->set_sizes_and_strides(sizes, strides, storage_offset);
  }
  alias._set_conj(conj);
  alias._set_neg(neg);
  return true;
}

void TensorRef::convertScalar(c10::ScalarType to) {
  if (!cpu_scalar || !wrapped_number || dtype == to) return;
  std::array<char, 16> converted{};
  AT_DISPATCH_ALL_TYPES_AND(c10::ScalarType::Bool, dtype, "convertScalar", [&] {
    scalar_t value;
    std::memcpy(&value, scalar_bytes.data(), sizeof(value));
    AT_DISPATCH_ALL_TYPES(to, "convertScalar", [&] {
      const scalar_t out = c10::convert<scalar_t>(value);
      std::memcpy(converted.data(), &out, sizeof(out));
    });
  });
  scalar_bytes = converted;
  dtype = to;
}

at::Tensor peerAccessView(const at::Tensor& t) {
  TORCH_CHECK_VALUE(t.device().type() == c10::DeviceType::PrivateUse1,
                    "peer access view: expected a spyre tensor, got one on ", t.device());
  TORCH_CHECK_VALUE(!t.is_conj() && !t.is_neg(),
                    "peer access view: expected a tensor without conj/neg bits (resolve_conj(), "
                    "resolve_neg() first)");
  c10::Storage owner = t.storage();
  return at::for_blob(flex::executorAddress(t.data_ptr()), t.sizes())
      .strides(t.strides())
      .deleter([owner](void*) {})  // the storage is released with the deleter
      .options(at::TensorOptions().dtype(t.dtype()).device(c10::kCPU))
      .make_tensor();
}

}  // namespace spyre
