"""C++ rows: the stream pool and the stub, each against a reference compiled into
the same library (csrc/spyre_bench.cpp: R0, R1, R2), run by torch_spyre._C._bench
without the GIL."""

import json
import subprocess
import sys

from measure import REPORT, Row, at_least, at_most, below, median

# row name -> (benchmark, reference, target, iterations per repeat: (full, quick))
ROWS = {
    "pool.resolve": ("pool.resolve", "R1", REPORT, (1_000_000, 20_000)),
    "pool.current_stream": ("pool.current_stream", "R0", REPORT, (1_000_000, 20_000)),
    "pool.get_stream_from_pool": (
        "pool.get_stream_from_pool", "R1", at_most(5), (1_000_000, 20_000)),
    "pool.mixed_reader_p99": ("pool.mixed_reader", "R1", REPORT, (200_000, 5_000)),
    # 64 first touches in a fresh process; the reader runs until they are done.
    "pool.first_touch_p99": (
        "pool.first_touch", "R1", below(1_000, "p99 < 1 us"), (1, 1)),
    "stub.round_trip": ("stub.round_trip", "R2", at_most(1.5), (2_000, 100)),
    "stub.pipelined_10k": ("stub.pipelined", "R2", at_most(2), (10_000, 10_000)),
    "stub.idle_sync": ("stub.idle_sync", "query()", below(1_000, "< 1 us"), (1_000_000, 10_000)),
    "stub.idle_device_sync_65": (
        "stub.idle_device_sync", "65 counters", below(3_000, "<= 3 us"), (100_000, 2_000)),
    "stub.overlap_2x20ms": ("stub.overlap_2_streams", "ideal", at_most(1.05), (1, 1)),
    "stub.overlap_32x20ms": ("stub.overlap_32_streams", "ideal", at_most(1.2), (1, 1)),
    "stub.same_stream_2x20ms": ("stub.same_stream_2_delays", "ideal", at_least(1.9), (1, 1)),
}

# Benchmarks reporting ms of wall time; the others report ns.
WALL_MS = {"stub.overlap_2_streams", "stub.overlap_32_streams", "stub.same_stream_2_delays"}
# Benchmarks that need a process in which no pool id was handed out yet,
# and those of them that can take only one sample per process.
FRESH_PROCESS = {"pool.first_touch", "stub.round_trip"}
ONCE_PER_PROCESS = {"pool.first_touch"}


def in_fresh_processes(bench, iterations, repeats):
    """Runs `bench` in new interpreters (one per repeat if it can run only once
    per process) and merges the samples."""
    once = bench in ONCE_PER_PROCESS
    code = (
        "import json, torch_spyre._C as C; "
        f"print(json.dumps(C._bench({bench!r}, {iterations}, {1 if once else repeats})))"
    )
    merged = {}
    for _ in range(repeats if once else 1):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{bench} failed in a fresh process:\n{proc.stderr}")
        for key, values in json.loads(proc.stdout.strip().splitlines()[-1]).items():
            merged.setdefault(key, []).extend(values)
    return merged


def rows(quick, repeats, selected):
    import torch_spyre._C as C

    result_rows = []
    for name, (bench, ref_name, target, (full, short)) in ROWS.items():
        if not selected(name):
            continue
        iterations = short if quick else full
        if bench in FRESH_PROCESS:
            once = quick and bench in ONCE_PER_PROCESS  # one fresh process is enough to check
            result = in_fresh_processes(bench, iterations, 1 if once else repeats)
        else:
            result = C._bench(bench, iterations, repeats)
        result_rows.append(
            Row(
                name=name,
                ours=median(result["ours"]),
                ref=median(result["ref"]),
                unit="ms" if bench in WALL_MS else "ns",
                ref_name=ref_name,
                target=target,
                checks={"enqueued_nothing": bool(min(result["enqueued_nothing"]))}
                if "enqueued_nothing" in result
                else {},
                extras={
                    key: median(values)
                    for key, values in result.items()
                    if key not in ("ours", "ref", "enqueued_nothing")
                },
            )
        )
    return result_rows
