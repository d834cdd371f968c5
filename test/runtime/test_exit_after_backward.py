"""Issue 30, item 2: a script that ran backward() on spyre exits 0, always.

torch's autograd device thread for spyre (`pt_autograd_<i>`) drops its last
reference to a graph task (the contextvars.Context backward() stashes, nodes,
hooks) after it wakes the caller; when the caller reaches interpreter
finalization first, that drop takes the GIL, CPython ends the thread with a
forced unwind through a noexcept frame and the process aborts (exit 134,
"terminate called without an active exception"). torch_spyre drains that
thread at exit (torch_spyre/_autograd_exit.py; docs/reliability.md, "Autograd
device threads at exit").

The race needs a loaded machine: every script runs RUNS times beside two
CPU-burning processes. To make hundreds of runs affordable, each run is a
child forked from a driver that imported torch once (the runtime and the
autograd threads start in the child, as in a fresh process); the child runs
the script with module-level globals and then leaves the driver's main
module, so it ends exactly as a script does: atexit, then Py_FinalizeEx. One
more check runs each script as a real fresh process a few times.

Measured on the 2-core development machine (shared with other jobs, load
average 4-17): see docs/reliability.md for the abort counts before and after
and the time per run. SPYRE_EXIT_STRESS_RUNS overrides RUNS (200 reproduces
the issue's acceptance run).
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import DEVICE_ENV, run_python

# The suite's default keeps the slow tier affordable (a forked run takes 5-15 s
# beside two burners); the acceptance count is SPYRE_EXIT_STRESS_RUNS=200.
RUNS = int(os.environ.get("SPYRE_EXIT_STRESS_RUNS", "3"))
ABORT = "terminate called without an active exception"

MODEL = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1)).to("spyre")
x = torch.randn(4, 8, device="spyre")
"""

SCRIPTS = {
    "plain": MODEL + """
loss = model(x).sum()
loss.backward()
""",
    "autocast": MODEL + """
with torch.autocast("spyre", dtype=torch.bfloat16):
    loss = model(x).float().sum()
loss.backward()
""",
    "ddp": """
import tempfile
import torch.distributed as dist
dist.init_process_group("spyreccl", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
""" + MODEL + """
ddp = nn.parallel.DistributedDataParallel(model)
loss = ddp(x).sum()
loss.backward()
dist.destroy_process_group()
""",
    "fsdp2": """
import tempfile
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
dist.init_process_group("spyreccl", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
""" + MODEL + """
mesh = init_device_mesh("spyre", (1,))
fully_shard(model, mesh=mesh)
loss = model(x).sum()
loss.backward()
dist.destroy_process_group()
""",
    "compiled": MODEL + """
step = torch.compile(lambda x: model(x).relu().sum())
loss = step(x)
loss.backward()
""",
}

# Forks a child per run; the child leaves the loop and ends the driver's main
# module normally (the script's globals are the driver's `g`, cleared at
# finalization like a script's). The parent reports every child's status.
DRIVER = """
import json, os, sys
import torch
import torch.distributed, torch.distributed.fsdp  # imported once, before any fork
torch.empty(2, device="meta").relu()  # the Python meta kernels' imports, once
code = compile(open(sys.argv[1]).read(), sys.argv[1], "exec")
g = {"__name__": "__main__"}
statuses = []
for _ in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        exec(code, g)
        break
    statuses.append(os.waitpid(pid, 0)[1])
else:
    print(json.dumps(statuses))
"""


def test_drain_releases_the_last_graph_task():
    # A final callback is held by the graph task only (torch never clears
    # them): once the drain returns, the device thread has dropped the task.
    proc = run_python("""
        import weakref, torch
        from torch_spyre._autograd_exit import drain_autograd_device_thread
        print(drain_autograd_device_thread())          # no backward yet: nothing started
        class Callback:
            def __call__(self):
                pass
        callback = Callback()
        held = weakref.ref(callback)
        w = torch.ones(3, device="spyre", requires_grad=True)
        y = w * 2
        y.register_hook(lambda g: torch.autograd.Variable._execution_engine.queue_callback(callback))
        y.sum().backward()
        del callback
        print(drain_autograd_device_thread(), held() is None, w.grad.cpu().tolist())
    """)
    assert proc.stdout.splitlines() == ["False", "True True [2.0, 2.0, 2.0]"]
    assert proc.stderr == ""


def test_exit_after_backward_does_not_wait_for_queued_work():
    # The drain queues no device work and waits for none: 60 s of queued work
    # and a gate never released leave the exit quick and clean.
    proc = run_python("""
        import time, torch
        from torch_spyre.testing import Gate
        model = torch.nn.Linear(4, 2).to("spyre")
        model(torch.ones(3, 4, device="spyre")).sum().backward()
        gate = Gate()
        gate.block(torch.spyre.default_stream())
        torch.spyre._sleep(60_000)
        s = torch.spyre.Stream()
        with s:
            torch.spyre._sleep(60_000)
        print(time.monotonic(), flush=True)
    """, timeout=120, check=False)
    exited = time.monotonic()
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    # Not the 60 s of queued work (exiting takes 10-20 s on this loaded 2-core machine).
    assert exited - float(proc.stdout.split()[-1]) < 40.0


def clean_env():
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"  # no compile worker pool per child
    return env


@pytest.fixture
def cpu_burners():
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in burners:
            proc.kill()
            proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(600 + 300 * RUNS)  # the subprocess's own deadline fails it first
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_forked_runs_exit_cleanly_beside_cpu_burners(name, tmp_path, cpu_burners):
    script = tmp_path / f"{name}.py"
    script.write_text(SCRIPTS[name])
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    proc = subprocess.run([sys.executable, str(driver), str(script), str(RUNS)], cwd=tmp_path,
                          env=clean_env(), capture_output=True, text=True, timeout=300 + 300 * RUNS)
    assert proc.returncode == 0, proc.stderr
    statuses = json.loads(proc.stdout.splitlines()[-1])
    assert len(statuses) == RUNS
    # A wait status: 0 is exit code 0; SIGABRT would be 6, exit code 134 is 134 << 8.
    assert [s for s in statuses if s != 0] == [], proc.stderr[-4000:]
    assert ABORT not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_fresh_processes_exit_cleanly_beside_cpu_burners(name, tmp_path, cpu_burners):
    script = tmp_path / f"{name}.py"
    script.write_text(SCRIPTS[name] + "print('done')\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert (proc.returncode, proc.stdout) == (0, "done\n"), proc.stderr[-4000:]
    assert ABORT not in proc.stderr
