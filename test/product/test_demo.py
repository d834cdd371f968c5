"""Issues 9, 19: examples/streams_demo.py runs on a small size and writes its outputs
(the trace is torch.profiler's)."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import DEVICE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # runs the whole demo (its deadline: 300 s)

from _helpers import ROOT
DEMO = os.path.join(ROOT, "examples", "streams_demo.py")


def test_demo_small_writes_trace_and_timeline(tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    proc = subprocess.run(
        [sys.executable, DEMO, "--small", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"speed-up from overlap: \d+\.\d\dx, results identical: True", proc.stdout), (
        proc.stdout
    )
    # The card's prediction (FLEX_STUB_TIMING=card in a child process, docs/timing.md).
    assert re.search(r"predicted speed-up from overlap on a card: \d+\.\d\dx", proc.stdout), (
        proc.stdout
    )
    # ... and its time by op class, each with the class's published error (docs/timing.md).
    assert re.search(r"\n  matmul: \d+\.\d{6} ms ± 25\.1-29\.8 %\n", proc.stdout), proc.stdout
    assert re.search(r"\n  softmax and norms: \d+\.\d{6} ms ± 21\.1 %\n", proc.stdout), proc.stdout
    assert re.search(r"\n  copies: \d+\.\d{6} ms \(no published error\)\n", proc.stdout), (
        proc.stdout
    )

    assert sorted(os.listdir(out)) == ["streams_demo.png", "streams_demo_trace.json"]
    assert (out / "streams_demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The Chrome trace is torch.profiler's: host ops, the two runs as ranges,
    # one device lane per stream (the single-stream run's and three more).
    events = json.loads((out / "streams_demo_trace.json").read_text())["traceEvents"]
    lanes = {
        e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 0
    }
    assert len(lanes) >= 4 and all(re.fullmatch(r"spyre:0 stream \d+ \(low priority\)", n)
                                   for n in lanes), lanes
    ranges = {e["name"] for e in events if e.get("cat") == "user_annotation"}
    assert {"1 stream", "3 streams + events"} <= ranges
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "cuda_sync")]
    kinds = {e["args"]["kind"] for e in device}
    assert {"h2d", "compute", "d2h", "event_wait"} <= kinds and "delay" not in kinds
    assert any(e.get("cat") == "ac2g" for e in events)  # launch -> device work arrows
