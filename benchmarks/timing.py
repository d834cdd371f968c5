"""The card time model's cost on the launch path: 1000 x `a + b` on 1K floats
and a synchronize, in a process with FLEX_STUB_TIMING=card against one with the
default host timing (the model is chosen when the runtime starts). Processes
alternate (card, host, card, ...); medians of each process's best loop."""

import os
import subprocess
import sys

from measure import Row, at_most, median

SCRIPT = """
import time, torch
a, b = torch.randn(1024, device="spyre"), torch.randn(1024, device="spyre")
n = {n}
best = float("inf")
for _ in range(5):
    start = time.perf_counter_ns()
    for _ in range(n):
        a + b
    torch.spyre.synchronize()
    best = min(best, (time.perf_counter_ns() - start) / n)
print(best, torch.spyre.timing_model())
"""


def ns_per_add(timing, n):
    env = dict(os.environ, FLEX_STUB_TIMING=timing)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(n=n)], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    assert out[1] == timing, out
    return float(out[0])


def rows(quick, repeats, selected):
    if not selected("timing.card_add_1k"):
        return []
    n = 100 if quick else 1000
    ours, ref = [], []
    for _ in range(repeats):
        ours.append(ns_per_add("card", n))
        ref.append(ns_per_add("host", n))
    return [Row("timing.card_add_1k", median(ours), median(ref), "ns", "FLEX_STUB_TIMING=host",
                at_most(1.25))]
