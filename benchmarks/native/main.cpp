// The C++ benchmark binary: `bench NAME ITERATIONS REPEATS` prints one JSON
// object {series: [samples]}; `bench --list` prints the benchmark names.
// Built by benchmarks/native.py from csrc/runtime (no ATen, no Python) and the
// stub, so benchmarks never ship in torch_spyre._C.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "bench.h"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--list") {
    for (const std::string& name : spyre::benchmarkNames()) std::printf("%s\n", name.c_str());
    return 0;
  }
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s NAME ITERATIONS REPEATS | --list\n", argv[0]);
    return 2;
  }
  try {
    const spyre::BenchResult result =
        spyre::runBenchmark(argv[1], std::atoll(argv[2]), std::atoi(argv[3]));
    std::string json = "{";
    for (const auto& [series, samples] : result) {
      if (json.size() > 1) json += ", ";
      json += "\"" + series + "\": [";
      for (size_t i = 0; i < samples.size(); ++i) {
        char number[64];
        std::snprintf(number, sizeof number, "%s%.17g", i ? ", " : "", samples[i]);
        json += number;
      }
      json += "]";
    }
    std::printf("%s}\n", json.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
