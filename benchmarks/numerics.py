"""DLFloat16 numerics rows (issue 50): what TORCH_SPYRE_NUMERICS=dl16 costs on the add-1K and
matmul rows, in float16. The switch is read once per process, so each side is its own process,
started A B A B (dl16, ieee), each timing the same loops after a warm-up; medians of each side.
The switch-off cost itself (one relaxed load and its branch per write) is in compute.add_1k and
compute.matmul_512, which run with the switch off."""

import os
import statistics
import subprocess
import sys

from measure import Row, at_most

SCRIPT = """
import time, torch
a, b = (torch.randn(1 << 10).half().to("spyre") for _ in range(2))
x, w = (torch.randn(512, 512).half().to("spyre") for _ in range(2))
assert torch.spyre.numerics() == {numerics!r}, torch.spyre.numerics()
def add_loop(n):
    for _ in range(n):
        a + b
    torch.spyre.synchronize()
def matmul(n):
    for _ in range(n):
        x @ w
    torch.spyre.synchronize()
for fn, n in ((add_loop, {adds}), (matmul, {matmuls})):
    fn(max(n // 10, 1))  # warm: first calls are tried at the call
    start = time.perf_counter_ns()
    fn(n)
    print((time.perf_counter_ns() - start) / n)
"""


def measure(numerics, adds, matmuls):
    env = dict(os.environ, TORCH_SPYRE_NUMERICS=numerics)
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(numerics=numerics, adds=adds,
                                                                  matmuls=matmuls)],
                         env=env, capture_output=True, text=True, check=True, timeout=600)
    return [float(line) for line in out.stdout.split()]


def rows(quick, repeats, selected):
    names = ("numerics.add_1k_dl16", "numerics.matmul_512_dl16")
    if not any(selected(name) for name in names):
        return []
    adds, matmuls = (100, 1) if quick else (1000, 10)
    ours, ref = [], []
    for _ in range(repeats):
        ours.append(measure("dl16:nnp1", adds, matmuls))
        ref.append(measure("ieee", adds, matmuls))
    result = []
    for i, (name, target) in enumerate(zip(names, (at_most(2), at_most(1.2)))):
        if selected(name):
            result.append(Row(name, statistics.median(o[i] for o in ours),
                              statistics.median(r[i] for r in ref), "ns", "ieee (switch off)",
                              target))
    return result
