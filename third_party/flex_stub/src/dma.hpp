// DMA engines: large copies split across worker threads (dma.cpp;
// docs/flex_stub.md, "DMA engines").
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "thread_cpus.hpp"

namespace flex::detail {

// `size` bytes from `src` to `dst`.
struct CopyRange {
  char* dst = nullptr;
  const char* src = nullptr;
  size_t size = 0;
};

class DmaEngines {
 public:
  // Copies below this size run on the calling engine alone: waking a worker
  // costs more than a smaller part saves.
  static constexpr size_t kMinPartBytes = size_t{1} << 20;

  // `engines` >= 1 threads share a copy; the calling engine is one of them, so
  // at most `engines - 1` workers are started, lazily: one per part beyond the
  // first of the largest copy so far. They run on `cpus`.
  DmaEngines(size_t engines, ThreadCpus cpus);
  DmaEngines(const DmaEngines&) = delete;
  DmaEngines& operator=(const DmaEngines&) = delete;
  ~DmaEngines();

  // Copies every range and returns when all bytes are there. The ranges must
  // not overlap one another's destinations or sources. The caller copies parts
  // too, so the copy completes even when no worker is free.
  void copy(std::vector<CopyRange> ranges);

  // Joins the workers. Called after the engines stopped: no copy is running.
  void stop();

  size_t engines() const { return engines_; }

 private:
  struct Job;
  void workerMain();

  const size_t engines_;
  const ThreadCpus cpus_;
  std::mutex mutex_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // one entry per worker a job asks for
  std::vector<std::thread> workers_;
  bool stopping_ = false;
};

}  // namespace flex::detail
