"""Every benchmark of docs/performance.md, as one table.

    python benchmarks/run.py                  # the full run (about 2 minutes)
    python benchmarks/run.py --quick          # short loops: proves the code works, not the speed
    python benchmarks/run.py --only stub. --json results.json
    python benchmarks/run.py --markdown       # the table as docs/performance.md shows it

Each row is a ratio of ours to a reference measured in the same process,
alternating A B A B ... and taking medians (default 7 repeats). Targets are
checked here and printed; nothing fails on speed.
"""

import argparse
import json
import os
import platform
import sys

import torch

import compiled
import compute
import first_result
import graphs
import native
import numerics
import profiling
import python_api
import round_trip
import sync_path
import timing


def format_value(value, unit):
    if unit == "ms":
        return f"{value:.2f} ms"
    if value >= 1e6:
        return f"{value / 1e6:.2f} ms"
    if value >= 1e3:
        return f"{value / 1e3:.2f} us"
    return f"{value:.1f} ns"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def machine():
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "load_before": os.getloadavg()[0],
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def print_table(rows, markdown=False):
    header = ("name", "ours", "reference", "ratio", "target", "result")
    lines = [
        (
            row.name,
            format_value(row.ours, row.unit),
            f"{format_value(row.ref, row.unit)} ({row.ref_name})",
            f"{row.ratio:.2f}x",
            row.target.describe(),
            row.result,
        )
        for row in rows
    ]
    if markdown:  # as docs/performance.md shows it
        for line in [header, ("---",) * len(header), *lines]:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *lines)]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(line, widths)).rstrip())
    print("\ndetails (medians; latencies in ns):")
    for row in rows:
        details = {**row.extras, **row.checks}
        if details:
            pairs = (
                f"{k}={v}" if isinstance(v, bool) else f"{k}={v:g}" for k, v in details.items()
            )
            print(f"  {row.name}: " + ", ".join(pairs))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short loops, 3 repeats")
    parser.add_argument("--repeats", type=int, help="A/B repeats per row (default 7, quick 3)")
    parser.add_argument("--only", default="", help="run the rows whose name starts with this")
    parser.add_argument("--json", help="also write the rows and the machine to this file")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 7)

    def selected(name):
        return name.startswith(args.only)

    info = machine()
    print(
        f"{info['cpus']} x {info['cpu']}, load {info['load_before']:.2f}, Python {info['python']}, "
        f"torch {info['torch']}, {repeats} repeats{' (quick)' if args.quick else ''}",
        flush=True,
    )
    rows = (
        native.rows(args.quick, repeats, selected)
        + python_api.rows(args.quick, repeats, selected)
        + round_trip.rows(args.quick, repeats, selected)
        + compute.rows(args.quick, repeats, selected)
        + numerics.rows(args.quick, repeats, selected)
        + compiled.rows(args.quick, repeats, selected)
        + graphs.rows(args.quick, repeats, selected)
        + sync_path.rows(args.quick, repeats, selected)
        + profiling.rows(args.quick, repeats, selected)
        + first_result.rows(args.quick, repeats, selected)
        + first_result.new_shapes_rows(args.quick, repeats, selected)
        + timing.rows(args.quick, repeats, selected)
    )
    info["load_after"] = os.getloadavg()[0]
    print_table(rows, args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": [row.as_dict() for row in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
