// A FIFO queue of fixed-size chunks: no allocation per element once it has
// reached the working depth (std::deque allocates a block every few large
// elements). A deeper queue adds chunks and moves no queued element; a chunk
// that empties is kept for reuse, so the queue never gives memory back
// (docs/flex_stub.md says why it is not a doubling ring).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

namespace flex::detail {

template <class T>
class ChunkedQueue {
 public:
  static constexpr size_t kChunk = 32;  // elements per chunk

  ChunkedQueue() = default;
  ChunkedQueue(const ChunkedQueue&) = delete;
  ChunkedQueue& operator=(const ChunkedQueue&) = delete;
  ~ChunkedQueue() {
    freeChain(head_);
    freeChain(spare_);
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& front() { return head_->slots[head_index_]; }

  void push_back(T&& item) {
    if (tail_ == nullptr || tail_index_ == kChunk) appendChunk();
    tail_->slots[tail_index_++] = std::move(item);
    ++size_;
  }

  // Moving out leaves the slot in its moved-from (resource-free) state.
  T pop_front() {
    T item = std::move(head_->slots[head_index_]);
    ++head_index_;
    --size_;
    if (size_ == 0) {
      // Empty: the next element goes to the start of this chunk, so a queue
      // that stays shallow keeps using one chunk.
      head_index_ = tail_index_ = 0;
      if (head_ != tail_) retireHeadChunksUpTo(tail_);
    } else if (head_index_ == kChunk) {
      retireHeadChunksUpTo(head_->next);
      head_index_ = 0;
    }
    return item;
  }

  // Chunks allocated so far (in use and kept for reuse): for tests.
  size_t chunks() const { return chunks_; }

 private:
  struct Chunk {
    T slots[kChunk];
    Chunk* next = nullptr;
  };

  void appendChunk() {
    Chunk* chunk = spare_;
    if (chunk != nullptr) {
      spare_ = chunk->next;
      chunk->next = nullptr;
    } else {
      chunk = new Chunk();
      ++chunks_;
    }
    if (tail_ == nullptr) {
      head_ = chunk;
      head_index_ = 0;
    } else {
      tail_->next = chunk;
    }
    tail_ = chunk;
    tail_index_ = 0;
  }

  // The chunks before `keep` go to the spare list; `keep` becomes the head.
  void retireHeadChunksUpTo(Chunk* keep) {
    while (head_ != keep) {
      Chunk* done = head_;
      head_ = done->next;
      done->next = spare_;
      spare_ = done;
    }
  }

  static void freeChain(Chunk* chunk) {
    while (chunk != nullptr) {
      Chunk* next = chunk->next;
      delete chunk;
      chunk = next;
    }
  }

  Chunk* head_ = nullptr;  // owns the chain head_ -> ... -> tail_
  Chunk* tail_ = nullptr;
  Chunk* spare_ = nullptr;  // emptied chunks, for reuse
  size_t head_index_ = 0;  // next element to pop, in head_
  size_t tail_index_ = 0;  // next free slot, in tail_
  size_t size_ = 0;
  size_t chunks_ = 0;
};

}  // namespace flex::detail
