"""Issue 9: examples/streams_demo.py runs on a small size and writes its outputs."""

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import DEVICE_ENV

pytestmark = pytest.mark.slow  # runs the whole demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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

    assert sorted(os.listdir(out)) == ["streams_demo.png", "streams_demo_trace.json"]
    assert (out / "streams_demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = json.loads((out / "streams_demo_trace.json").read_text())["traceEvents"]
    lanes = {
        (e["pid"], e["args"]["name"])
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert lanes == {(1, "stream"), (2, "copy-in"), (2, "compute"), (2, "copy-out")}
    kinds = {e["cat"] for e in events if e["ph"] == "X"}
    assert {"h2d", "compute", "d2h"} <= kinds and "delay" not in kinds
