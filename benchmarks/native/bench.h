// Microbenchmarks of the stream pool and the stub runtime, each interleaved
// with a small reference design compiled into this same library (so both pay
// the same TLS model and call overhead). benchmarks/run.py turns the samples
// into ratios; docs/performance.md describes the method and the references.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace spyre {

// Named series of samples: "ours"/"ref" per repeat (ns/op or ms of wall time),
// plus benchmark-specific extras such as "ours_p99" or "enqueued_nothing".
using BenchResult = std::map<std::string, std::vector<double>>;

// Runs benchmark `name` (see benchmarkNames()) `repeats` times, alternating
// ours and the reference; `iterations` is the loop length of one repeat.
// Blocks for as long as it runs: call it without the GIL.
BenchResult runBenchmark(const std::string& name, int64_t iterations, int repeats);

std::vector<std::string> benchmarkNames();

}  // namespace spyre
