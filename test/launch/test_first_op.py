"""Issue 30, item 3: the first op of a process answers at once.

Output metadata is inferred with C++ meta kernels (csrc/launch/meta_inference.h):
torch replaces ~630 of them with Python ones at `import torch`, and the first
Python meta kernel imports sympy or torch._dynamo (500-800 modules, seconds).
Each test runs in a fresh interpreter: what is imported, and how long a first
op takes, are per-process facts.
"""

import pytest

from conftest import run_python

COMPILER_STACK = ("torch._dynamo", "torch._inductor", "sympy")

# Every first op: forward ops, an index, a data-dependent op, a masked fill and a backward
# through mm, relu, layer_norm and sum. Spyre's results are compared with
# CPU's exactly; the CPU reference runs after the check of sys.modules.
FIRST_OPS = f"""
import sys
import torch
import torch.nn.functional as F

def run(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=g).to(device)
    w = torch.randn(32, 32, generator=g).to(device)
    img = torch.randn(2, 3, 8, 8, generator=g).to(device)
    k = torch.randn(4, 3, 3, 3, generator=g).to(device)
    idx = torch.tensor([3, 0, 7]).to(device)
    out = {{
        "mm": x @ w,
        "add": x + 1,
        "add_tensor": x + x,
        "relu": torch.relu(x),
        "gelu": F.gelu(x),
        "softmax": torch.softmax(x, dim=1),
        "layer_norm": F.layer_norm(x, (32,)),
        "conv2d": F.conv2d(img, k, padding=1),
        "sum": x.sum(),
        "sum_dim": x.sum(dim=0),
        "index": x[idx],
        "nonzero": torch.nonzero(x > 0.5),
        "masked_fill": x.masked_fill(x > 0, 0.0),
    }}
    leaf = x.detach().requires_grad_()
    gamma = torch.ones(32).to(device).requires_grad_()
    loss = F.layer_norm(torch.relu(leaf @ w), (32,), gamma).sum()
    loss.backward()
    out["loss"] = loss.detach()
    out["grad_x"] = leaf.grad
    out["grad_gamma"] = gamma.grad
    return {{name: t.cpu() for name, t in out.items()}}

spyre = run("spyre")
appeared = [m for m in {COMPILER_STACK!r} if m in sys.modules]
cpu = run("cpu")
differ = [name for name in cpu if not torch.equal(spyre[name], cpu[name])]
print("appeared", appeared)
print("differ", differ)
"""


def test_first_ops_import_no_compiler_stack_and_match_cpu():
    proc = run_python(FIRST_OPS, fresh=True)  # the fork server has imported dynamo
    assert "appeared []\n" in proc.stdout, proc.stdout
    assert "differ []\n" in proc.stdout, proc.stdout


# The first `relu(x @ w) + 1` of a process, queued on a stream a gate holds:
# the call only infers metadata, allocates, verifies the kernels once on
# scratch memory and queues; it cannot wait for the op, which cannot run.
FIRST_QUEUED = """
import time
import torch
from torch_spyre.testing import Gate

x = torch.randn(64, 64, device="spyre")
w = torch.randn(64, 64, device="spyre")
torch.spyre.synchronize()
# This thread's OpenMP team starts at its first parallel CPU kernel (CPU's
# first mm pays it too: 40+ ms of waiting for cores on a loaded machine);
# start it now so that the call measures the launch path alone.
torch.randn(64, 64) @ torch.randn(64, 64)
s = torch.spyre.Stream()
with Gate() as gate:
    gate.block(s)
    with s:
        wall, cpu = time.perf_counter(), time.thread_time()
        z = torch.relu(x @ w) + 1
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    queued = not s.query()
torch.spyre.synchronize()
assert torch.equal(z.cpu(), torch.relu(x.cpu() @ w.cpu()) + 1)
print(f"queued={queued} wall_ms={wall * 1e3:.3f} cpu_ms={cpu * 1e3:.3f}")
"""


def test_first_op_behind_a_gate_returns_at_once():
    # Three fresh processes. The calling thread's CPU time is what the call
    # costs whatever the machine's load: under 50 ms in every one (2-3 ms
    # measured; importing the compiler stack cost 1000+ ms of it). Wall time
    # adds waiting for cores; the scratch run of each kernel is single-threaded,
    # so it wakes no OpenMP team (which cost 55-75 ms of waiting at load 5).
    # The wall bound here is the inner tier's load allowance: the best of
    # three under 250 ms (the slow tier's test below holds 50 ms in 3 of 3).
    walls = []
    for _ in range(3):
        out = run_python(FIRST_QUEUED, fresh=True).stdout.split()
        fields = dict(field.split("=") for field in out)
        assert fields["queued"] == "True", out
        assert float(fields["cpu_ms"]) < 50, out
        walls.append(float(fields["wall_ms"]))
    assert min(walls) < 250, walls


# The same first call queued behind 400 ms of device work on its own stream.
FIRST_BEHIND_BUSY = """
import time
import torch

x = torch.randn(64, 64, device="spyre")
w = torch.randn(64, 64, device="spyre")
torch.spyre.synchronize()
torch.randn(64, 64) @ torch.randn(64, 64)  # this thread's OpenMP team, started
torch.spyre._sleep(400)
wall, cpu = time.perf_counter(), time.thread_time()
z = torch.relu(x @ w) + 1
wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
busy = not torch.spyre.current_stream().query()
assert torch.equal(z.cpu(), torch.relu(x.cpu() @ w.cpu()) + 1)
print(f"busy={busy} wall_ms={wall * 1e3:.3f} cpu_ms={cpu * 1e3:.3f}")
"""


@pytest.mark.slow
def test_first_op_behind_a_busy_stream_returns_within_50_ms():
    # The first call's extra work (meta inference, one single-threaded scratch
    # run per kernel) does not depend on other work: 2-6 ms wall measured at
    # load 5, where the multi-threaded scratch run took 55-76 ms.
    for _ in range(3):
        out = run_python(FIRST_BEHIND_BUSY, fresh=True).stdout.split()
        fields = dict(field.split("=") for field in out)
        assert fields["busy"] == "True", out
        assert float(fields["wall_ms"]) < 50, out
