// The SIGSEGV/SIGBUS handler that turns a host access to device memory into a
// report, and an executor's SIGBUS (the shared memory behind device memory
// could not supply a page) into another. Faults elsewhere go to the handler
// that was installed before (Python's faulthandler, a debugger's, the
// default), so other crashes behave as usual.
// Async-signal-safe: no allocation, no lock waited for (the allocation lookup
// tries the arena's lock once), write(2) to fd 2.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "device_arena.hpp"
#include "flex/flex.hpp"

namespace flex::detail {
namespace {

struct sigaction g_previous_segv;
struct sigaction g_previous_bus;
std::atomic<void (*)(int)> g_extra_reporter{nullptr};

void put(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(2, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void putHex(uintptr_t value) {
  char text[2 + 16 + 1];
  char* end = text + sizeof text - 1;
  *end = '\0';
  char* p = end;
  do {
    *--p = "0123456789abcdef"[value & 0xf];
    value >>= 4;
  } while (value != 0);
  *--p = 'x';
  *--p = '0';
  put(p);
}

void putDecimal(size_t value) {
  char text[24];
  char* p = text + sizeof text - 1;
  *p = '\0';
  do {
    *--p = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value != 0);
  put(p);
}

void chain(const struct sigaction& previous, int sig, siginfo_t* info, void* context) {
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) {
      previous.sa_sigaction(sig, info, context);
      return;
    }
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // The default action: reinstate it; returning re-runs the faulting access.
  signal(sig, SIG_DFL);
  if (info == nullptr || info->si_code <= 0) raise(sig);  // sent, not a fault: resend
}

// Where `device_address` falls, as a line of the report.
void putAllocation(uintptr_t device_address) {
  uintptr_t start = 0;
  size_t size = 0;
  DeviceArena* arena = DeviceArena::ifReserved();
  const DeviceArena::Lookup found = arena != nullptr
                                        ? arena->allocationAtForFault(device_address, &start, &size)
                                        : DeviceArena::Lookup::None;
  if (found == DeviceArena::Lookup::Found) {
    put("It falls in the device allocation starting at ");
    putHex(start);
    put(" of ");
    putDecimal(size);
    put(" bytes (offset ");
    putDecimal(device_address - start);
    put(").\n");
  } else if (found == DeviceArena::Lookup::Busy) {
    put("Its allocation is unknown: the registry of device allocations was busy (a fault report "
        "does not wait for it).\n");
  } else {
    put("It falls in no live device allocation (freed memory, or past the end of one).\n");
  }
}

// An executor (DMA, fill, graph replay, a kernel) touched device memory
// through its read-write view and the shared memory behind it could not supply
// the page: SIGBUS, where a card would have its memory.
void reportExhaustedBacking(uintptr_t executor_address) {
  const uintptr_t device_address = executor_address - static_cast<uintptr_t>(g_executor_offset);
  put("\nFatal error: spyre device memory at address ");
  putHex(device_address);
  put(" could not be backed (SIGBUS at the runtime's executor address ");
  putHex(executor_address);
  put(")\nThe emulated device memory lives in shared memory (a memfd); the host could not "
      "supply a page for it: the machine or container is out of memory (or of shared memory).\n");
  putAllocation(device_address);
  put("Fix: free host memory or raise the container's memory limit, or give the emulated "
      "device less memory (FLEX_STUB_MEMORY_BYTES) and use less of it.\n");
}

void onFault(int sig, siginfo_t* info, void* context) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  const bool fault = info != nullptr && info->si_code > 0;
  const bool device = fault && address - g_arena_base < g_arena_bytes;
  const bool executor =
      fault && sig == SIGBUS && g_arena_bytes != 0 &&
      address - (g_arena_base + static_cast<uintptr_t>(g_executor_offset)) < g_arena_bytes;
  if (executor) {
    reportExhaustedBacking(address);
    signal(sig, SIG_DFL);  // die of the signal: this fault is explained
    return;
  }
  if (!device) {
    chain(sig == SIGBUS ? g_previous_bus : g_previous_segv, sig, info, context);
    return;
  }
  put("\nFatal error: the host accessed spyre device memory at address ");
  putHex(address);
  put("\nThis address is spyre device memory: host code cannot read or write it (on a Spyre "
      "card it is not mapped either).\n");
  putAllocation(address);
  put("Fix: copy the data to the host first (tensor.cpu(), tensor.to('cpu'), or copy_ into a "
      "CPU tensor) and read or write that copy; hand device tensors to device code only.\n");
  if (void (*reporter)(int) = g_extra_reporter.load()) reporter(2);
  // Die of the signal, past any other handler: this fault is explained.
  signal(sig, SIG_DFL);
}

}  // namespace

void installDeviceFaultHandler() {
  struct sigaction action {};
  action.sa_sigaction = onFault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
  sigaction(SIGBUS, &action, &g_previous_bus);
}

}  // namespace flex::detail

namespace flex {

void setDeviceFaultReporter(void (*reporter)(int fd)) { detail::g_extra_reporter.store(reporter); }

}  // namespace flex
