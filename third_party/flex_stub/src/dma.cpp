// DMA engines. One stream's copy runs on its engine thread as before; a large
// one is cut into parts of whole pages that the engine and up to
// FLEX_STUB_DMA_ENGINES - 1 workers copy at once. The engine returns only when
// every part is done, so the operation completes, in stream order, with all of
// its bytes in place.
#include "dma.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <system_error>

namespace flex::detail {
namespace {

constexpr size_t kPageBytes = 4096;
constexpr size_t kPartsPerEngine = 4;

}  // namespace

struct DmaEngines::Job {
  std::vector<CopyRange> ranges;
  size_t part_bytes = 0;
  size_t parts = 0;
  std::atomic<size_t> next_part{0};
  std::mutex mutex;
  std::condition_variable done_cv;
  size_t finished_parts = 0;  // guarded by mutex

  // Claims and copies one part; false when every part was already claimed.
  bool runPart() {
    const size_t part = next_part.fetch_add(1, std::memory_order_relaxed);
    if (part >= parts) return false;
    size_t begin = part * part_bytes;
    size_t end = begin + part_bytes;
    size_t offset = 0;  // of the current range in the whole copy
    for (const CopyRange& range : ranges) {
      const size_t range_end = offset + range.size;
      if (range_end > begin && offset < end) {
        const size_t from = std::max(begin, offset) - offset;
        const size_t to = std::min(end, range_end) - offset;
        std::memcpy(range.dst + from, range.src + from, to - from);
      }
      offset = range_end;
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (++finished_parts == parts) done_cv.notify_one();
    return true;
  }
};

DmaEngines::DmaEngines(size_t engines, ThreadCpus cpus)
    : engines_(std::max<size_t>(engines, 1)), cpus_(cpus) {}

DmaEngines::~DmaEngines() { stop(); }

void DmaEngines::copy(std::vector<CopyRange> ranges) {
  size_t total = 0;
  for (const CopyRange& range : ranges) total += range.size;
  // A few parts per thread, claimed as threads get to them: a thread that is
  // descheduled for a while delays the copy by one small part, not by its share.
  const size_t parts =
      std::min(engines_ * kPartsPerEngine, std::max<size_t>(total / kMinPartBytes, 1));
  if (parts == 1 || engines_ == 1) {
    for (const CopyRange& range : ranges) std::memcpy(range.dst, range.src, range.size);
    return;
  }
  auto job = std::make_shared<Job>();
  job->ranges = std::move(ranges);
  job->part_bytes = ((total + parts - 1) / parts + kPageBytes - 1) / kPageBytes * kPageBytes;
  job->parts = (total + job->part_bytes - 1) / job->part_bytes;
  const size_t wanted = std::min(job->parts, engines_) - 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < wanted; ++i) queue_.push_back(job);
    // A worker per part beyond the caller's, up to engines - 1; one that cannot start
    // (or shutdown) leaves its parts to the threads already there.
    while (!stopping_ && workers_.size() < wanted) {
      try {
        workers_.emplace_back(&DmaEngines::workerMain, this);
      } catch (const std::system_error&) {
        break;
      }
    }
  }
  for (size_t i = 0; i < wanted; ++i) work_cv_.notify_one();
  while (job->runPart()) {
  }
  std::unique_lock<std::mutex> lock(job->mutex);
  job->done_cv.wait(lock, [&] { return job->finished_parts == job->parts; });
}

void DmaEngines::workerMain() {
  cpus_.applyToCallingThread();
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to copy
    std::shared_ptr<Job> job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    while (job->runPart()) {
    }
    job.reset();
    lock.lock();
  }
}

void DmaEngines::stop() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    workers.swap(workers_);
  }
  work_cv_.notify_all();
  for (std::thread& worker : workers) worker.join();
}

}  // namespace flex::detail
