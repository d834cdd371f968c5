"""Time to first result (issue 30): a fresh process imports torch, runs five
first ops and reads the result with .item(), on spyre against the same on CPU.
Processes alternate (spyre, cpu, spyre, ...); medians. Each process times
itself from before `import torch` to the value it read, so interpreter start
and exit are left out of both."""

import os
import subprocess
import sys

from measure import Row, at_most, median

SCRIPT = """
import time
start = time.perf_counter()
import torch
d = {device!r}
x = torch.ones(64, 64, device=d) / 8
w = torch.ones(64, 64, device=d) / 16
y = torch.softmax(torch.relu(x @ w) + 1, dim=1).sum()  # mm, relu, add, softmax, sum
value = y.item()
print(time.perf_counter() - start, value)
"""


def first_result(device):
    """(seconds to first result, the value) of a fresh process on `device`."""
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(device=device)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    return float(out[0]), float(out[1])


def rows(quick, repeats, selected):
    if not selected("process.first_result"):
        return []
    first_result("spyre")  # warm the page cache for both
    first_result("cpu")
    ours, ref, same = [], [], True
    for _ in range(repeats):
        seconds, spyre_value = first_result("spyre")
        ours.append(seconds * 1e9)
        seconds, cpu_value = first_result("cpu")
        ref.append(seconds * 1e9)
        same = same and spyre_value == cpu_value
    return [Row("process.first_result", median(ours), median(ref), "ns", "the same on cpu",
                at_most(1.25), checks={"same_value": same})]


# Every call of a new shape builds a launch plan (metadata inference, layouts):
# 128 new shapes x 6 small ops, each op already called once on another shape,
# then a synchronize; in a fresh process, against the same loop on CPU.
NEW_SHAPES = """
import time
import torch
d = {device!r}
def ops(x):
    return [x + 1, x * x, torch.relu(x), x.sum(dim=0), torch.exp(x), x.mean()]
ops(torch.randn(3, 5, device=d))
torch.accelerator.synchronize() if d != "cpu" else None
xs = [torch.randn(n + 7, 11, device=d) for n in range(128)]
torch.accelerator.synchronize() if d != "cpu" else None
start = time.perf_counter()
for x in xs:
    ops(x)
torch.accelerator.synchronize() if d != "cpu" else None
print(time.perf_counter() - start)
"""


def new_shapes_pass(device):
    out = subprocess.run([sys.executable, "-c", NEW_SHAPES.format(device=device)], env=dict(os.environ),
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    return float(out[0]) * 1e9


def new_shapes_rows(quick, repeats, selected):
    if not selected("process.first_pass_new_shapes"):
        return []
    ours, ref = [], []
    for _ in range(repeats):
        ours.append(new_shapes_pass("spyre"))
        ref.append(new_shapes_pass("cpu"))
    return [Row("process.first_pass_new_shapes", median(ours), median(ref), "ns",
                "the same on cpu", at_most(2.0))]
