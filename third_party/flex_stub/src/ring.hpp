// A growable FIFO ring buffer: no allocation per element once it has grown to
// the working depth (std::deque allocates a block every few large elements).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace flex::detail {

template <class T>
class Ring {
 public:
  bool empty() const { return head_ == tail_; }
  size_t size() const { return static_cast<size_t>(tail_ - head_); }
  T& front() { return slots_[head_ & mask_]; }

  void push_back(T&& item) {
    if (size() == capacity_) grow();
    slots_[tail_ & mask_] = std::move(item);
    ++tail_;
  }

  // Moving out leaves the slot in its moved-from (resource-free) state.
  T pop_front() {
    T item = std::move(slots_[head_ & mask_]);
    ++head_;
    return item;
  }

 private:
  void grow() {
    const size_t count = size();
    const size_t capacity = capacity_ ? capacity_ * 2 : 16;
    std::unique_ptr<T[]> slots(new T[capacity]);
    for (size_t i = 0; i < count; ++i) slots[i] = std::move(slots_[(head_ + i) & mask_]);
    slots_ = std::move(slots);
    capacity_ = capacity;
    mask_ = capacity - 1;
    head_ = 0;
    tail_ = count;
  }

  std::unique_ptr<T[]> slots_;
  size_t capacity_ = 0;
  size_t mask_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

}  // namespace flex::detail
