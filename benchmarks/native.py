"""C++ rows: the stream pool and the stub, each against a reference compiled into
the same program (benchmarks/native/bench.cpp: R0, R1, R2). The program is built
here from csrc/runtime (no ATen, no Python) and the stub, so no benchmark code
ships in torch_spyre._C; every run is a fresh process."""

import glob
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from measure import Row, at_least, at_most, below, median

# row name -> (benchmark, reference, target, iterations per repeat: (full, quick))
ROWS = {
    # Targets: issue 16.
    "pool.resolve": ("pool.resolve", "R1", at_most(2), (1_000_000, 20_000)),
    "pool.current_stream": ("pool.current_stream", "R0", at_most(2), (1_000_000, 20_000)),
    "pool.get_stream_from_pool": (
        "pool.get_stream_from_pool", "R1", at_most(5), (1_000_000, 20_000)),
    "pool.mixed_reader_p99": (
        "pool.mixed_reader", "R1", below(2_000, "p99 <= 2 us"), (200_000, 5_000)),
    # 64 first touches in a fresh process; the reader runs until they are done.
    "pool.first_touch_p99": (
        "pool.first_touch", "R1", below(1_000, "p99 < 1 us"), (1, 1)),
    "stub.round_trip": ("stub.round_trip", "R2", at_most(1.5), (2_000, 100)),
    "stub.pipelined_10k": ("stub.pipelined", "R2", at_most(2), (10_000, 10_000)),
    "stub.idle_sync": ("stub.idle_sync", "query()", below(1_000, "< 1 us"), (1_000_000, 10_000)),
    "stub.idle_device_sync_65": (
        "stub.idle_device_sync", "69 counters", below(3_000, "<= 3 us"), (100_000, 2_000)),
    "stub.overlap_2x20ms": ("stub.overlap_2_streams", "ideal", at_most(1.05), (1, 1)),
    "stub.overlap_32x20ms": ("stub.overlap_32_streams", "ideal", at_most(1.2), (1, 1)),
    "stub.same_stream_2x20ms": ("stub.same_stream_2_delays", "ideal", at_least(1.9), (1, 1)),
    # Issue 51: card timing keeps its per-launch cost after a million launches.
    "stub.card_launch_after_1m": (
        "stub.card_launch_after_1m", "first launches", at_most(2), (100_000, 10_000)),
}

# Benchmarks reporting ms of wall time; the others report ns.
WALL_MS = {"stub.overlap_2_streams", "stub.overlap_32_streams", "stub.same_stream_2_delays"}
# Benchmarks that can take only one sample per process (every run is a fresh
# process; these need one in which no pool id was handed out yet).
ONCE_PER_PROCESS = {"pool.first_touch", "stub.card_launch_after_1m"}


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_DIR = os.path.join(ROOT, "build", "bench")


def build():
    """Compile the benchmark program (objects reused while newer than every input)."""
    import torch

    sys.path.insert(0, os.path.join(ROOT, "third_party", "flex_stub"))
    import flex_stub_build

    torch_dir = os.path.dirname(torch.__file__)
    stub_lib = flex_stub_build.build_flex_stub(BUILD_DIR, os.path.join(BUILD_DIR, "obj"))
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "runtime", "*.cpp")))
    sources += sorted(glob.glob(os.path.join(ROOT, "benchmarks", "native", "*.cpp")))
    headers = glob.glob(os.path.join(ROOT, "csrc", "runtime", "*.h"))
    headers += glob.glob(os.path.join(ROOT, "benchmarks", "native", "*.h"))
    headers += glob.glob(os.path.join(flex_stub_build.INCLUDE_DIR, "flex", "*.hpp"))
    newest_header = max(os.path.getmtime(h) for h in headers)
    flags = ["-std=c++20", "-O2", "-g0", "-fPIC", "-pthread", "-Wno-interference-size",
             "-I", os.path.join(ROOT, "csrc"), "-I", flex_stub_build.INCLUDE_DIR,
             "-isystem", os.path.join(torch_dir, "include")]
    obj_dir = os.path.join(BUILD_DIR, "obj")

    def compile_one(src):
        obj = os.path.join(obj_dir, os.path.basename(os.path.dirname(src)) + "_"
                           + os.path.basename(src) + ".o")
        newest = max(os.path.getmtime(src), newest_header)
        if not os.path.exists(obj) or os.path.getmtime(obj) < newest:
            subprocess.check_call(["g++", *flags, "-c", src, "-o", obj])
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, sources))
    binary = os.path.join(BUILD_DIR, "bench")
    newest_input = max(os.path.getmtime(p) for p in [*objects, stub_lib])
    if not os.path.exists(binary) or os.path.getmtime(binary) < newest_input:
        lib = os.path.join(torch_dir, "lib")
        subprocess.check_call(["g++", "-pthread", *objects, "-o", binary, "-L", BUILD_DIR,
                               "-lflex_stub", "-L", lib, "-lc10",
                               f"-Wl,-rpath,{BUILD_DIR}:{lib}"])
    return binary


def bench_names():
    return subprocess.check_output([build(), "--list"], text=True).split()


def run_bench(bench, iterations, repeats):
    """Runs `bench` in new processes (one per repeat if it can run only once
    per process) and merges the samples."""
    binary = build()
    once = bench in ONCE_PER_PROCESS
    merged = {}
    for _ in range(repeats if once else 1):
        proc = subprocess.run([binary, bench, str(iterations), str(1 if once else repeats)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{bench} failed:\n{proc.stderr}")
        for key, values in json.loads(proc.stdout.strip().splitlines()[-1]).items():
            merged.setdefault(key, []).extend(values)
    return merged


def rows(quick, repeats, selected):
    result_rows = []
    for name, (bench, ref_name, target, (full, short)) in ROWS.items():
        if not selected(name):
            continue
        iterations = short if quick else full
        once = quick and bench in ONCE_PER_PROCESS  # one fresh process is enough to check
        result = run_bench(bench, iterations, 1 if once else repeats)
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
