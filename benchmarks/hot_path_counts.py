"""What one small op costs the host and the engine, counted (issue 52 item 3).

    python benchmarks/hot_path_counts.py            # the table, spyre beside CPU eager
    python benchmarks/hot_path_counts.py --json     # the same as JSON (the test reads it)

Per `y = x + 1` (1 024 float32; spyre's on a side stream, queued behind a
gate in chunks so that no count depends on timing), over N ops after a
warm-up, and per `synchronize()` and `query()` of an idle spyre stream:
allocations, lock acquisitions, futex and condition waits, and GIL
acquisitions, on the calling (host) thread and on every other thread (the
stub's engines), divided by N. Counted by an LD_PRELOAD library
(benchmarks/native/hot_path_counter.c) built here with the system compiler:
the script runs itself again in a fresh process with it preloaded. Counts,
not times: the figures do not depend on the machine's load.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "native", "hot_path_counter.c")
KINDS = ("mallocs", "locks", "futex_waits", "cond_waits", "gil")
SIDES = ("host", "engine")
ENV_FLAG = "TORCH_SPYRE_HOT_PATH_COUNTER"  # set in the child: the library's path


def build(directory):
    """The counter library, compiled into `directory`; its path."""
    compiler = os.environ.get("CC", "cc")
    out = os.path.join(directory, "hot_path_counter.so")
    subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", out, SOURCE, "-ldl"], check=True)
    return out


def measure(n, warmup, chunk=256):
    """{device: {side: {kind: per-op count}}}, in this (preloaded) process.

    Spyre's ops are queued behind a gate in chunks of `chunk`, then released
    and waited for: the stream is never idle while the host launches (an idle
    stream's first launch also wakes the scheduler), and each op reuses one
    that a previous chunk ran. Host counts cover the launches only; engine
    counts the whole chunk (the engine's gate wait too, divided among its ops).
    """
    import torch
    import torch_spyre  # noqa: F401
    from torch_spyre.testing import Gate

    lib = ctypes.CDLL(os.environ[ENV_FLAG])
    assert lib.hpc_kinds() == len(KINDS), "the counter library and this script disagree"
    width = len(KINDS) * len(SIDES)

    def read():
        out = (ctypes.c_long * width)()
        lib.hpc_read(out)
        return list(out)

    def per_op(host, engine, count):
        return {
            "host": {kind: host[k] / count for k, kind in enumerate(KINDS)},
            "engine": {kind: engine[len(KINDS) + k] / count for k, kind in enumerate(KINDS)},
        }

    def spyre_chunks(x, stream, total):
        host, engine = [0] * width, [0] * width
        for _ in range(total // chunk):
            gate = Gate()
            gate.block(stream)
            start = read()
            for _ in range(chunk):
                x + 1
            launched = read()
            gate.release()
            stream.synchronize()
            done = read()
            host = [h + b - a for h, a, b in zip(host, start, launched)]
            engine = [e + c - a for e, a, c in zip(engine, start, done)]
        return host, engine

    results = {}
    stream = torch.spyre.Stream()
    with torch.spyre.stream(stream):
        x = torch.randn(1024, device="spyre")
        spyre_chunks(x, stream, warmup)
        lib.hpc_reset()
        lib.hpc_enable(1)
        host, engine = spyre_chunks(x, stream, n)
        lib.hpc_enable(0)
        results["spyre"] = per_op(host, engine, n // chunk * chunk)

    def host_calls(call):
        for _ in range(warmup):
            call()
        lib.hpc_reset()
        lib.hpc_enable(1)
        start = read()
        for _ in range(n):
            call()
        done = read()
        lib.hpc_enable(0)
        delta = [b - a for a, b in zip(start, done)]
        return per_op(delta, delta, n)

    x = torch.randn(1024)
    results["cpu"] = host_calls(lambda: x + 1)
    # Waiting for a stream with nothing queued, beside asking it whether it has.
    idle = torch.spyre.Stream()
    idle.synchronize()
    results["idle_sync"] = host_calls(idle.synchronize)
    results["idle_query"] = host_calls(idle.query)
    return results


def run(n=20_000, warmup=2_000):
    """Runs the measurement in a fresh process with the counter preloaded, in the default
    configuration: the sanitizer, the card rules and the card clock each add work per op, so
    the caller's TORCH_SPYRE_* and FLEX_STUB_* settings are left out."""
    with tempfile.TemporaryDirectory() as directory:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TORCH_SPYRE_", "FLEX_STUB_"))}
        env[ENV_FLAG] = build(directory)
        env["LD_PRELOAD"] = ":".join(filter(None, [env[ENV_FLAG], env.get("LD_PRELOAD")]))
        child = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--child", str(n), str(warmup)],
            env=env, capture_output=True, text=True, check=False, timeout=600,
        )
    if child.returncode != 0:
        raise RuntimeError(f"hot path counter failed ({child.returncode}):\n{child.stderr}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def print_table(results):
    header = ["per op"] + [f"{side} {kind}" for side in SIDES for kind in KINDS]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for device, label in (("spyre", "spyre `x + 1` (side stream)"), ("cpu", "CPU eager `x + 1`"),
                          ("idle_sync", "idle `stream.synchronize()`"),
                          ("idle_query", "idle `stream.query()`")):
        cells = [f"{results[device][side][kind]:.2f}" for side in SIDES for kind in KINDS]
        print("| " + " | ".join([label] + cells) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="ops counted per device")
    parser.add_argument("--warmup", type=int, default=2_000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(*args.child)))
        return 0
    results = run(args.n, args.warmup)
    if args.json:
        print(json.dumps(results))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
