"""Streams on spyre, made visible: a copy -> compute -> copy pipeline.

The same work runs twice on the emulated device. First everything goes on one
stream. Then three streams share it: copy-in, compute and copy-out, with
events between them. Chunk i's compute then overlaps chunk i+1's copy-in and
chunk i-1's copy-out. The script checks that both runs give identical
results and prints the speed-up from the overlap. Both runs are recorded
with torch.profiler (ProfilerActivity.PrivateUse1, docs/profiling.md): the
exported Chrome trace (chrome://tracing, ui.perfetto.dev) has the host's ops,
one device lane per stream and arrows from each launch to its device work;
the PNG timeline is drawn from that trace's device events.

Beside the emulator's time the script prints, and draws, what a Spyre card
would take for the same program: it runs the pipeline again in a child process
with FLEX_STUB_TIMING=card (the card time model, docs/timing.md) and reads that
run's modeled timeline from its FLEX_STUB_TRACE.

Copies take emulated device time: they run at FLEX_STUB_DMA_GBPS, which the
script sets before torch starts the runtime. Each chunk's kernel is ordinary
torch code (a layer norm, a linear layer, a GELU, a cast to bfloat16): every
op is queued on the compute stream and runs on the device's engine while the
host goes on queueing the next chunk's copies.

    python examples/streams_demo.py               # writes ./out/
    python examples/streams_demo.py --out DIR --small
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# Read once, when the runtime starts: set it before importing torch.
os.environ.setdefault("FLEX_STUB_DMA_GBPS", "0.25")  # 1 MiB takes ~4 ms

import torch  # noqa: E402  (registers torch.spyre)
from torch.autograd.profiler import record_function  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

SIZES = {  # chunks, float32 elements per chunk
    "full": (8, 1 << 18),
    "small": (3, 1 << 14),
}
FEATURES = 256  # a chunk is a batch of rows of this many features
KIND_COLORS = {
    "h2d": "#4C72B0",
    "d2h": "#55A868",
    "compute": "#C44E52",
    "event_wait": "#DDDDDD",
}
# Operations that move data or compute; event records and waits are bookkeeping.
WORK_KINDS = {"h2d", "d2h", "compute"}
# The Chrome trace categories of device activities (docs/profiling.md).
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"}
KIND_LABELS = {
    "h2d": "copy host to device",
    "d2h": "copy device to host",
    "compute": "kernels: layer norm, linear, GELU, to bfloat16",
    "event_wait": "waiting on an event",
}


def chunk_kernel(chunk, weight):
    """The per-chunk model: plain torch ops, each queued on the current stream."""
    rows = torch.nn.functional.layer_norm(chunk.view(-1, FEATURES), (FEATURES,))
    return torch.nn.functional.gelu(rows @ weight).to(torch.bfloat16)


def pipeline(inputs, outputs, weight, copy_in, compute, copy_out):
    """Each chunk: copy in, compute, copy out, ordered across streams by events.

    On one stream (all three the same) the events are no-ops and the steps
    run back to back.
    """
    for host_in, host_out in zip(inputs, outputs):
        loaded, computed = torch.spyre.Event(), torch.spyre.Event()
        with torch.spyre.stream(copy_in):
            chunk = host_in.to("spyre", non_blocking=True)
            loaded.record(copy_in)
        with torch.spyre.stream(compute):
            compute.wait_event(loaded)
            result = chunk_kernel(chunk, weight)
            computed.record(compute)
        with torch.spyre.stream(copy_out):
            copy_out.wait_event(computed)
            host_out.copy_(result, non_blocking=True)
            # `result` was made on the compute stream: its memory must not be
            # reused before this stream has copied it out.
            result.record_stream(copy_out)
    torch.spyre.synchronize()


def timed_run(title, inputs, weight, streams):
    """Wall seconds and the stacked results; inside a profile, a range named `title`."""
    outputs = [
        torch.empty(host_in.numel() // FEATURES, FEATURES, dtype=torch.bfloat16).pin_memory()
        for host_in in inputs
    ]
    with record_function(title):
        start = time.perf_counter()
        pipeline(inputs, outputs, weight, *streams)
        seconds = time.perf_counter() - start
    return seconds, torch.stack(outputs)


def lane_name(kinds):
    """Names a stream of the three-stream run after the work it did."""
    if "compute" in kinds:
        return "compute"
    return "copy-in" if "h2d" in kinds else "copy-out"


def device_lanes(trace_path, titles):
    """The device work of each run (a record_function range) in the exported
    profiler trace: {title: {lane: [(kind, start_us, dur_us), ...]}}."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    ranges = {e["name"]: e for e in events
              if e.get("cat") == "user_annotation" and e["name"] in titles}
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    lanes = {}
    for title in titles:
        window = ranges[title]
        start, end = window["ts"], window["ts"] + window["dur"]
        by_stream = {}
        for e in device:
            if start <= e["ts"] <= end:
                by_stream.setdefault(e["tid"], []).append(e)
        # Only the run's own streams: freeing a block records an event on every
        # stream that used it (the caching allocator), e.g. the previous run's.
        by_stream = {
            tid: ops for tid, ops in by_stream.items()
            if any(op["args"]["kind"] in WORK_KINDS for op in ops)
        }
        origin = min(op["ts"] for ops in by_stream.values() for op in ops)
        run = {}
        for tid, ops in sorted(by_stream.items()):
            name = "stream" if len(by_stream) == 1 else lane_name({op["args"]["kind"] for op in ops})
            run[name] = [(op["args"]["kind"], op["ts"] - origin, op["dur"]) for op in ops]
        lanes[title] = run
    return lanes


def card_prediction(small):
    """The same runs on the card time model, in a child process (the model is
    chosen when the runtime starts): ({title: modeled seconds}, {title: lanes},
    the card's time by op class with each class's published error)."""
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "card_trace.json")
        env = dict(os.environ, FLEX_STUB_TIMING="card", FLEX_STUB_TRACE=trace)
        argv = [sys.executable, os.path.abspath(__file__), "--card-windows"] + (["--small"] if small else [])
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=True)
        windows, by_class = json.loads(out.stdout.strip().splitlines()[-1])
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    walls, lanes = {}, {}
    for title, (start_ms, end_ms) in windows.items():
        start_us, end_us = start_ms * 1e3, end_ms * 1e3
        by_stream = {}
        for e in events:
            if e["cat"] in WORK_KINDS and start_us <= e["ts"] < end_us:
                by_stream.setdefault(e["tid"], []).append(e)
        run = {}
        for tid, ops in sorted(by_stream.items()):
            name = "stream" if len(by_stream) == 1 else lane_name({op["cat"] for op in ops})
            run[name] = [(op["cat"], op["ts"] - start_us, op["dur"]) for op in ops]
        walls[f"card: {title}"] = (end_ms - start_ms) / 1e3
        lanes[f"card: {title}"] = run
    return walls, lanes, by_class


def card_windows(origin, inputs, weight, runs):
    """Child mode (FLEX_STUB_TIMING=card): each run's modeled [start, end] in ms
    from `origin`, the first record (modeled time 0, where the trace starts)."""
    timed_run("warm-up", inputs[:1], weight, runs["3 streams + events"])
    torch.spyre.card_summary(reset=True)  # the by-class split counts the two runs
    windows = {}
    for title, streams in runs.items():
        start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
        start.record()
        timed_run(title, inputs, weight, streams)  # ends with a device synchronize
        end.record()
        end.synchronize()
        windows[title] = [origin.elapsed_time(start), origin.elapsed_time(end)]
    print(json.dumps([windows, torch.spyre.format_card_summary(torch.spyre.card_summary())]))
    return 0


def plot_timeline(lanes, walls, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    order = ["copy-in", "compute", "copy-out", "stream"]
    # The card's panels run on another time scale: each pair shares its own axis.
    fig, axes = plt.subplots(
        len(lanes), 1, figsize=(9, 1.7 * len(lanes)),
        gridspec_kw={"height_ratios": [len(run) for run in lanes.values()]},
    )
    seen = set()
    for ax, (title, run) in zip(axes, lanes.items()):
        names = sorted(run, key=order.index)
        for row, name in enumerate(reversed(names)):
            for kind, start_us, dur_us in run[name]:
                if dur_us <= 0 or kind not in KIND_COLORS:
                    continue
                seen.add(kind)
                ax.broken_barh([(start_us / 1e3, dur_us / 1e3)], (row - 0.4, 0.8),
                               facecolors=KIND_COLORS[kind], edgecolors="white", linewidth=0.5)
        ax.set_yticks(range(len(names)), list(reversed(names)))
        card = title.startswith("card: ")
        unit = "modeled Spyre card" if card else "emulator"
        ax.set_title(f"{title}: {walls[title] * 1e3:.3g} ms ({unit})", loc="left", fontsize=10)
        ax.set_xlim(0, max(walls[t] for t in walls if t.startswith("card: ") == card) * 1e3)
        ax.tick_params(labelsize=8)
        ax.set_xlabel(f"{unit} time (ms)", fontsize=8)
    fig.legend(
        handles=[
            Patch(color=KIND_COLORS[k], label=KIND_LABELS[k]) for k in KIND_COLORS if k in seen
        ],
        loc="lower center", ncol=len(seen), fontsize=8, frameon=False,
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description="copy -> compute -> copy on 1 and 3 spyre streams")
    parser.add_argument("--out", default="out", help="output folder (default ./out)")
    parser.add_argument("--small", action="store_true", help="a small, quick run (CI)")
    parser.add_argument("--card-windows", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.card_windows:
        origin = torch.spyre.Event(enable_timing=True)
        origin.record()  # before any device work: modeled time 0
    chunks, elements = SIZES["small" if args.small else "full"]

    torch.manual_seed(0)
    inputs = [torch.randn(elements).pin_memory() for _ in range(chunks)]
    weight_cpu = torch.randn(FEATURES, FEATURES) / FEATURES**0.5
    weight = weight_cpu.to("spyre")
    one = torch.spyre.Stream()
    three = [torch.spyre.Stream() for _ in range(3)]  # distinct from `one` and each other
    runs = {"1 stream": (one, one, one), "3 streams + events": tuple(three)}
    if args.card_windows:
        return card_windows(origin, inputs, weight, runs)
    os.makedirs(args.out, exist_ok=True)

    timed_run("warm-up", inputs[:1], weight, runs["3 streams + events"])  # engines, kernels
    walls, results = {}, {}
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for title, streams in runs.items():
            walls[title], results[title] = timed_run(title, inputs, weight, streams)
    single, overlapped = results.values()
    expected = torch.stack([chunk_kernel(x, weight_cpu) for x in inputs])  # the same model on CPU
    identical = torch.equal(single, overlapped) and torch.equal(single, expected)
    trace_path = os.path.join(args.out, "streams_demo_trace.json")
    png_path = os.path.join(args.out, "streams_demo.png")
    prof.export_chrome_trace(trace_path)
    card_walls, card_lanes, card_by_class = card_prediction(args.small)
    plot_timeline({**device_lanes(trace_path, list(runs)), **card_lanes}, {**walls, **card_walls},
                  png_path)

    megabytes = elements * 4 / 2**20
    print(f"{chunks} chunks of {megabytes:g} MiB, DMA {os.environ['FLEX_STUB_DMA_GBPS']} GB/s, "
          f"kernels: layer norm + {FEATURES}x{FEATURES} linear + GELU per chunk")
    for title, seconds in walls.items():
        print(f"  {title:<20} {seconds * 1e3:7.1f} ms")
    single_s, overlapped_s = walls.values()
    print(f"speed-up from overlap: {single_s / overlapped_s:.2f}x, "
          f"results identical: {identical}")
    print("on a Spyre card (FLEX_STUB_TIMING=card, modeled: docs/timing.md):")
    for title, seconds in card_walls.items():
        print(f"  {title[len('card: '):]:<20} {seconds * 1e3:9.3f} ms")
    card_single, card_overlapped = card_walls.values()
    print(f"predicted speed-up from overlap on a card: {card_single / card_overlapped:.2f}x")
    print("card time of both runs by op class (± the class's published model error):")
    for line in card_by_class.splitlines():
        print(f"  {line}")
    print(f"wrote {trace_path} and {png_path}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
