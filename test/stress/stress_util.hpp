// Shared helpers of the stress programs: checks that count instead of abort
// (a sanitizer report or a failed check both fail the run), option parsing and
// a small deterministic PRNG.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace stress {

inline std::atomic<uint64_t> g_failures{0};
inline std::mutex g_print_mutex;

inline void fail(const char* file, int line, const std::string& what) {
  // Print the first few only: a systematic failure repeats 10^5 times.
  if (g_failures.fetch_add(1) < 20) {
    std::lock_guard<std::mutex> lock(g_print_mutex);
    std::fprintf(stdout, "FAIL %s:%d: %s\n", file, line, what.c_str());
    std::fflush(stdout);
  }
}

#define STRESS_CHECK(cond, ...)                                                      \
  do {                                                                               \
    if (!(cond)) ::stress::fail(__FILE__, __LINE__, std::string(#cond " ") + __VA_ARGS__); \
  } while (0)

// xorshift64*: deterministic per thread, cheap, good enough to mix operations.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1Dull;
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

// "--name value" from argv, else `fallback`.
inline long long option(int argc, char** argv, const char* name, long long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) {
      return std::atoll(argv[i + 1]);
    }
  }
  return fallback;
}

inline const char* optionString(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) {
      return argv[i + 1];
    }
  }
  return fallback;
}

}  // namespace stress
