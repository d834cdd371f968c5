// The plan cache's key (aten/plan.h): the exact metadata of a call, every
// thing an op's meta kernel may read, as a vector of words.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

namespace spyre::launch {

// The exact metadata of a call: everything a meta kernel may read. add()
// returns false for arguments the launch path does not handle (objects,
// generators).
class KeyBuilder {
 public:
  explicit KeyBuilder(const c10::OperatorHandle& op) {
    words_.reserve(64);  // a binary op on 2-d tensors takes ~30 words: one allocation
    words_.push_back(reinterpret_cast<int64_t>(&op.schema()));
  }

  bool add(const c10::IValue& v);

  std::vector<int64_t> take() { return std::move(words_); }

 private:
  static int64_t bits(double d);
  void addString(const std::string& s);
  void addTensor(const at::Tensor& t);

  std::vector<int64_t> words_;
  std::vector<const c10::StorageImpl*> storages_;
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& words) const {
    uint64_t h = 1469598103934665603ull;
    for (const int64_t w : words) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

}  // namespace spyre::launch
