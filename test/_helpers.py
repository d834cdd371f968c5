"""Helpers shared by the test files (fixtures are in conftest.py): deadlines for
waits, torchrun jobs, and C++ libraries built by a test."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import DEVICE_ENV, LOAD_FACTOR_CAP, load_factor


def wait_until(condition, timeout=30, what=None, interval=0.001):
    """Poll `condition()` until it is true; fail the test naming `what` if `timeout`
    seconds (on an idle machine: times the load factor) pass first. Waits for an observable
    state, never for time."""
    timeout *= load_factor()
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what or condition}")
        time.sleep(interval)


def run_threads(target, args_list, timeout=60):
    """Runs target(*args) on one thread per entry of `args_list` and joins them all;
    fails the test if one is still running after `timeout` seconds (times the load factor)."""
    import threading

    threads = [threading.Thread(target=target, args=args) for args in args_list]
    for thread in threads:
        thread.start()
    wait_until(lambda: not any(thread.is_alive() for thread in threads), timeout,
               what=f"{len(threads)} threads running {target.__name__}")


# Source of wait_until for code run by run_python (raises AssertionError; the same load factor).
WAIT_UNTIL = f'''
def wait_until(condition, timeout=30, what=None, interval=0.001):
    import os as _os, time as _time
    timeout *= min({LOAD_FACTOR_CAP}, max(1.0, _os.getloadavg()[0] / len(_os.sched_getaffinity(0))))
    deadline = _time.monotonic() + timeout
    while not condition():
        assert _time.monotonic() <= deadline, f"timed out after {{timeout:g}} s waiting for {{what or condition}}"
        _time.sleep(interval)
'''


# ---------------------------------------------------------------- torchrun jobs

ROOT = Path(__file__).resolve().parent.parent
NPROC = 2


def torchrun(tmp_path, script, env=None, check=True, timeout=120, launcher_args=("--standalone",)):
    """Run `script` under torchrun with NPROC ranks (cwd and OUT_DIR: tmp_path); `timeout` is
    for an idle machine (times the load factor)."""
    timeout *= load_factor()
    path = tmp_path / "worker.py"
    path.write_text(textwrap.dedent(script))
    full_env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    full_env.update(OUT_DIR=str(tmp_path), **(env or {}))
    cmd = [sys.executable, "-m", "torch.distributed.run", *launcher_args,
           f"--nproc-per-node={NPROC}", str(path)]
    # A session of its own, so a hang kills the launcher and its agent together.
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=full_env, text=True, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        kill_workers(path)  # before reading: a live worker holds the pipes open
        stdout, stderr = proc.communicate()
        pytest.fail(f"torchrun timed out after {timeout:.0f} s\n"
                    f"--- stdout\n{stdout}\n--- stderr\n{stderr}")
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if check and result.returncode != 0:
        pytest.fail(f"torchrun exited {result.returncode}\n"
                    f"--- stdout\n{stdout}\n--- stderr\n{stderr}")
    return result


def kill_workers(script):
    """torchrun starts each worker in a session of its own, so killing the
    launcher's leaves them running: find them by the script they run."""
    needle = str(script).encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle in f.read().split(b"\0"):
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass  # gone already, or not ours to read


def rank_results(tmp_path):
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(NPROC)]


# Shared by the worker scripts: record values, errors and the per-rank output.
PRELUDE = """
import json, os, threading
import torch
import torch.distributed as dist

LOCAL_RANK = int(os.environ["LOCAL_RANK"])
out = {}

def error(fn):
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, str(e)]
    return None

def save():
    rank = int(os.environ["RANK"])
    with open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
"""




# ---------------------------------------------------------------- C++ built by a test


def build_shared_library(tmp_path, name, source, *flags):
    """Compile `source` (C++) into tmp_path/<name>.so with `flags`; returns its path."""
    src = tmp_path / f"{name}.cpp"
    src.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.so"
    subprocess.run(["c++", "-shared", "-fPIC", "-O1", "-std=c++17", str(src), "-o", str(out), *flags],
                   check=True, timeout=300)
    return out
