// The plan cache's key (launch/plan.h): the exact metadata of a call, every
// thing an op's meta kernel may read, as a vector of words. Built on the
// stack (no heap allocation for the usual call): it is built at every op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>

namespace spyre::launch {

// The exact metadata of a call: everything a meta kernel may read. add()
// returns false for arguments the launch path does not handle (objects,
// generators).
class KeyBuilder {
 public:
  explicit KeyBuilder(const c10::OperatorHandle& op) {
    words_.push_back(reinterpret_cast<int64_t>(&op.schema()));
  }

  bool add(const c10::IValue& v);

  c10::ArrayRef<int64_t> words() const { return words_; }

  // The shape-free form (plan templates, launch/plan.cpp): device tensors leave
  // out their sizes, strides, offset and storage size, and add() returns false
  // unless every device tensor has the contiguous strides of one shape (shape()).
  // 0-dim CPU tensors (scalars) are encoded as always.
  static KeyBuilder shapeFree(const c10::OperatorHandle& op) {
    KeyBuilder key(op);
    key.shape_free_ = true;
    return key;
  }
  c10::IntArrayRef shape() const { return shape_; }

 private:
  static int64_t bits(double d);
  void addString(const std::string& s);
  bool addTensor(const at::Tensor& t);

  // A binary op on 2-d tensors takes ~30 words.
  c10::SmallVector<int64_t, 64> words_;
  c10::SmallVector<const c10::StorageImpl*, 8> storages_;
  bool shape_free_ = false;
  bool has_shape_ = false;
  c10::IntArrayRef shape_;  // the device tensors' one shape (shape-free form)
};

// Hash and equality of keys, transparent: a map keyed by std::vector is
// searched with the words a KeyBuilder holds, without copying them.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(c10::ArrayRef<int64_t> words) const {
    uint64_t h = 1469598103934665603ull;
    for (const int64_t w : words) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

struct KeyEqual {
  using is_transparent = void;
  bool operator()(c10::ArrayRef<int64_t> a, c10::ArrayRef<int64_t> b) const { return a.equals(b); }
};

}  // namespace spyre::launch
