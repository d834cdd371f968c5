"""Memory benchmarks of issue 10 (docs/performance.md, "Memory").

    python benchmarks/bench_memory.py           # the full run
    python benchmarks/bench_memory.py --quick   # short loops: proves the code works, not the speed

Each row compares ours with a CPU reference measured in the same process,
alternating A B A B ... and taking the median of each side, so the machine's
noise hits both. `run()` returns rows of (name, ours_seconds,
reference_seconds, target_ratio); a row meets its target when
ours / reference <= target_ratio.
"""

import argparse
import gc
import statistics
import time

import torch
import torch_spyre  # noqa: F401  (registers the device when autoload is off)

MiB = 1 << 20
SPYRE = torch.device("spyre")


def interleaved(ours, reference, repeats, inner):
    """Median seconds per call of `ours` and of `reference`, timed A B A B ..."""

    def batch(fn):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        return (time.perf_counter() - start) / inner

    ours()
    reference()  # warm up: first-touch pages, cached blocks, DMA workers
    ours_times, reference_times = [], []
    gc.disable()
    try:
        for _ in range(repeats):
            ours_times.append(batch(ours))
            reference_times.append(batch(reference))
    finally:
        gc.enable()
    return statistics.median(ours_times), statistics.median(reference_times)


def run(quick: bool):
    repeats = 7 if quick else 15
    copies = 1 if quick else 3  # 64 MiB copies per timed batch
    allocations = 2000 if quick else 20000

    host = torch.randn(64 * MiB // 4)
    device = host.to(SPYRE)
    torch.spyre.synchronize()

    def to_spyre():
        host.to(SPYRE)
        torch.spyre.synchronize()

    rows = [
        (
            "64 MiB x.to('spyre') + synchronize vs CPU x.clone()",
            *interleaved(to_spyre, host.clone, repeats, copies),
            0.6,
        ),
        (
            "64 MiB y.cpu() vs CPU x.clone()",
            *interleaved(device.cpu, host.clone, repeats, copies),
            1.25,
        ),
    ]
    del device

    def allocate_cached():
        torch.empty(1 << 18, device=SPYRE)  # 1 MiB, freed at once: the same cached block

    def allocate_cpu():
        torch.empty(1 << 18)

    rows.append(
        (
            "allocate+free a cached 1 MiB block vs CPU torch.empty(1 << 18)",
            *interleaved(allocate_cached, allocate_cpu, repeats, allocations),
            2.0,
        )
    )
    return rows


def format_seconds(seconds):
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} us"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short loops")
    args = parser.parse_args()
    rows = run(args.quick)
    header = ("benchmark", "ours", "reference", "ratio", "target", "result")
    lines = [
        (
            name,
            format_seconds(ours),
            format_seconds(reference),
            f"{ours / reference:.2f}x",
            f"<= {target:g}x",
            "PASS" if ours / reference <= target else "MISS",
        )
        for name, ours, reference, target in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)))


if __name__ == "__main__":
    main()
