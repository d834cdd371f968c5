#include "launch/plan_key.h"

#include <algorithm>
#include <cstring>

#include <c10/util/strides.h>

#include "launch/scalar_class.h"

namespace spyre::launch {

bool KeyBuilder::add(const c10::IValue& v) {
  if (v.isTensor()) {
    return addTensor(v.toTensor());
  } else if (v.isNone()) {
    words_.push_back(1);
  } else if (v.isInt()) {
    words_.push_back(2);
    words_.push_back(v.toInt());
  } else if (v.isDouble()) {
    words_.push_back(3);
    words_.push_back(bits(v.toDouble()));
  } else if (v.isBool()) {
    words_.push_back(4);
    words_.push_back(v.toBool());
  } else if (v.isComplexDouble()) {
    const c10::complex<double> c = v.toComplexDouble();
    words_.push_back(5);
    words_.push_back(bits(c.real()));
    words_.push_back(bits(c.imag()));
  } else if (v.isString()) {
    addString(v.toStringRef());
  } else if (v.isDevice()) {
    words_.push_back(7);
    words_.push_back(static_cast<int64_t>(v.toDevice().type()) * 1000 + v.toDevice().index());
  } else if (v.isSymInt() || v.isSymFloat() || v.isSymBool()) {
    return false;
  } else if (v.isList()) {
    const auto list = v.toListRef();
    words_.push_back(8);
    words_.push_back(static_cast<int64_t>(list.size()));
    for (const c10::IValue& element : list) {
      if (!add(element)) return false;
    }
  } else {
    return false;  // generators, objects, futures, ...
  }
  return true;
}

int64_t KeyBuilder::bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}

void KeyBuilder::addString(const std::string& s) {
  words_.push_back(6);
  words_.push_back(static_cast<int64_t>(s.size()));
  for (size_t i = 0; i < s.size(); i += 8) {
    int64_t chunk = 0;
    std::memcpy(&chunk, s.data() + i, std::min<size_t>(8, s.size() - i));
    words_.push_back(chunk);
  }
}

bool KeyBuilder::addTensor(const at::Tensor& t) {
  if (!t.defined()) {
    words_.push_back(-1);
    return true;
  }
  // Which earlier tensor argument shares the storage: overlap checks depend on it.
  const c10::StorageImpl* storage = t.has_storage() ? t.storage().unsafeGetStorageImpl() : nullptr;
  int64_t alias = -1;
  for (size_t i = 0; i < storages_.size(); ++i) {
    if (storages_[i] == storage && storage != nullptr) alias = static_cast<int64_t>(i);
  }
  storages_.push_back(storage);
  words_.push_back(static_cast<int64_t>(t.device().type()));
  words_.push_back(static_cast<int64_t>(t.scalar_type()));
  words_.push_back((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) |
                   (t.unsafeGetTensorImpl()->is_wrapped_number() ? 4 : 0));
  words_.push_back(alias);
  words_.push_back(t.dim());
  // A 0-dim CPU value's class (launch/scalar_class.h): kernels verified for one
  // value of a class hold for every value of it.
  if (t.is_cpu() && t.dim() == 0) words_.push_back(scalarClass(t));
  if (shape_free_ && !(t.is_cpu() && t.dim() == 0)) {
    // The contiguous strides exactly: is_contiguous() ignores the strides of size-1
    // dimensions, which TensorIterator carries over to its outputs.
    if (!t.strides().equals(c10::contiguous_strides(t.sizes()))) return false;
    if (has_shape_ && !t.sizes().equals(shape_)) return false;
    shape_ = t.sizes();  // the argument outlives the key
    has_shape_ = true;
    return true;
  }
  for (const int64_t s : t.sizes()) words_.push_back(s);
  for (const int64_t s : t.strides()) words_.push_back(s);
  words_.push_back(t.storage_offset());
  words_.push_back(storage != nullptr ? static_cast<int64_t>(t.storage().nbytes()) : -1);
  return true;
}
}  // namespace spyre::launch
