"""Issue 30, item 5: quiet by default. A plain run of the streams demo and of
the README's torchrun example prints on stderr only what torch itself prints
(docs/development.md, "What torch prints"):

- Kineto's two `USDT: ... profiler_start` / `profiler_stop` lines, for every
  torch.profiler profile, with or without spyre (the demo profiles);
- torchrun's banner about OMP_NUM_THREADS, printed by the launcher before any
  worker starts when the variable is unset and more than one process runs.

Slow: each runs a whole demo. Fast: DDP on spyre collects its time stats
(torch_spyre's timer, csrc/device/ddp_timer.cpp) instead of warning.
"""

import os
import re
import subprocess
import sys

import pytest

from conftest import DEVICE_ENV, run_python

from _helpers import ROOT
KINETO = [re.compile(r"USDT:\S+ \S+ \d+:\d+ SyncActivityProfilerHandler\.cpp:\d+\] profiler_start"),
          re.compile(r"USDT:\S+ \S+ \d+:\d+ SyncActivityProfilerHandler\.cpp:\d+\] profiler_stop")]
# torch's logging prefix, present or not depending on how torch's logging is set up.
LAUNCHER = r"(?:W\d{4} \S+ \d+ \S*torch/distributed/run\.py:\d+\] )?"
TORCHRUN_BANNER = [
    re.compile(LAUNCHER + r"\s*$"),
    re.compile(LAUNCHER + r"\*+$"),
    re.compile(LAUNCHER + r"Setting OMP_NUM_THREADS environment variable for each process to be 1"
               r" in default, .*$"),
    re.compile(LAUNCHER + r"\*+$"),
]


def clean_env():
    # A user's plain shell: no device variables, no OMP_NUM_THREADS, no PYTHONWARNINGS.
    env = {k: v for k, v in os.environ.items()
           if k not in DEVICE_ENV and k not in ("OMP_NUM_THREADS", "PYTHONWARNINGS")}
    return env


def assert_lines(stderr, patterns):
    lines = stderr.splitlines()
    assert len(lines) == len(patterns), stderr
    for line, pattern in zip(lines, patterns):
        assert pattern.fullmatch(line), (line, stderr)


@pytest.mark.slow
def test_streams_demo_prints_only_kinetos_lines(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "streams_demo.py"), "--small",
         "--out", str(tmp_path / "out")],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_lines(proc.stderr, KINETO)


@pytest.mark.slow
def test_readme_torchrun_example_prints_only_the_launchers_banner(tmp_path):
    # The README's command: torchrun --standalone --nproc-per-node=2 examples/torchrun_demo.py
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         os.path.join(ROOT, "examples", "torchrun_demo.py")],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600,
        start_new_session=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "parameter checksum" in proc.stdout
    assert_lines(proc.stderr, TORCHRUN_BANNER)


def test_ddp_collects_time_stats_without_a_warning():
    proc = run_python("""
        import tempfile, torch
        import torch.distributed as dist
        from torch import nn
        dist.init_process_group("spyreccl", init_method="file://" + tempfile.mktemp(),
                                rank=0, world_size=1)
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to("spyre"))
        for _ in range(3):  # stats are taken at the start of each iteration after the first
            ddp(torch.ones(3, 4, device="spyre")).sum().backward()
        data = ddp._get_ddp_logging_data()
        print(data["avg_forward_compute_time"] > 0, data["avg_backward_compute_time"] > 0)
        dist.destroy_process_group()
    """)
    assert proc.stdout.splitlines() == ["True True"]
    assert proc.stderr == ""
