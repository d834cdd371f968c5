"""Issue 51: examples/card_plan.py prints a GPT-2-small block's modeled card time by layer and
op class, what overlap saves and what a larger batch costs; the figures are modeled card time,
so two runs print the same."""

import os
import re
import subprocess
import sys

import pytest

from conftest import DEVICE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

from _helpers import ROOT
PLAN = os.path.join(ROOT, "examples", "card_plan.py")


def run_plan():
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    proc = subprocess.run([sys.executable, PLAN, "--seq", "64", "--layers", "2", "--batch", "2"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_card_plan_prints_layer_classes_overlap_and_batch():
    out = run_plan()
    assert out.startswith("GPT-2-small block, batch 1, sequence 64 (modeled Spyre card time)\n")
    layer = float(re.search(r"^one layer: (\d+\.\d{6}) ms$", out, re.M).group(1))
    classes = dict(re.findall(r"^  ([a-z ]+): (\d+\.\d{6}) ms", out, re.M))
    assert {"matmul", "batched matmul", "softmax and norms", "pointwise"} <= set(classes), out
    assert re.search(r"^  batched matmul: \d+\.\d{6} ms ± 26\.5-40 %$", out, re.M), out
    # The layer runs on one stream: its classes add up to its time (whole ns each).
    assert sum(float(ms) for ms in classes.values()) == pytest.approx(layer, abs=1e-5)
    serial, overlapped, saved = map(float, re.search(
        r"one stream (\d+\.\d+) ms, prefetch on a side stream (\d+\.\d+) ms, overlap saves "
        r"(\d+\.\d+) ms", out).groups())
    assert overlapped < serial and saved == pytest.approx(serial - overlapped, abs=2e-6)
    big = float(re.search(r"^batch 2: (\d+\.\d{6}) ms per layer", out, re.M).group(1))
    assert big > layer
    assert run_plan() == out  # modeled time: the same on a second run
