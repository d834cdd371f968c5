#include "runtime/host_wait.h"

#include <atomic>
#include <thread>

#include <unistd.h>

namespace spyre {
namespace {

std::atomic<bool> process_exiting{false};
std::atomic<std::thread::id> exiting_thread{};
std::atomic<bool (*)() noexcept> exit_park_check{nullptr};
std::atomic<void (*)(HostWaitFn, void*) noexcept> host_wait_wrapper{nullptr};
std::atomic<int> threads_in_host_waits{0};

}  // namespace

void detail::markProcessExiting() {
  exiting_thread.store(std::this_thread::get_id());
  process_exiting.store(true, std::memory_order_release);
}

void parkIfExiting() noexcept {
  bool park = false;
  if (process_exiting.load(std::memory_order_acquire)) {
    park = exiting_thread.load() != std::this_thread::get_id();
  } else if (auto check = exit_park_check.load(std::memory_order_acquire)) {
    park = check();
  }
  while (park) {
    pause();  // until the process is gone
  }
}

void setExitParkCheck(bool (*check)() noexcept) {
  exit_park_check.store(check, std::memory_order_release);
}

void runHostWait(HostWaitFn fn, void* arg) noexcept {
  struct Count {
    Count() { threads_in_host_waits.fetch_add(1); }
    ~Count() { threads_in_host_waits.fetch_sub(1); }
  } count;
  if (auto wrapper = host_wait_wrapper.load(std::memory_order_acquire)) {
    wrapper(fn, arg);
  } else {
    fn(arg);
  }
}

int threadsInHostWaits() noexcept {
  return threads_in_host_waits.load();
}

void setHostWaitWrapper(void (*wrapper)(HostWaitFn fn, void* arg) noexcept) {
  host_wait_wrapper.store(wrapper, std::memory_order_release);
}

}  // namespace spyre
