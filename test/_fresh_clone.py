"""A fresh clone of the checkout, set up as a new user sets it up, built once per test run.

A copy of the git-tracked files (what a clean clone holds) in which the README's first Quick-start
command, `bash scripts/run_demo.sh`, ran on a fresh machine's PATH (`python3`, no `python`,
nothing activated): it created the clone's .venv/ and built torch_spyre from nothing into it.
Without ccache that build compiles about 60 files, so one build serves every test that needs a
clean clone built: product/test_quickstart.py checks what the command printed and runs the
second command in the clone; product/test_install.py builds its wheel from the clone (pip's
in-tree build finds the clone's objects up to date and only links).

pytest-xdist's workers share the clone through a lock (one test in it at a time); it is kept in
build/fresh-clone/<the run's id>/ until the next run makes its own; its build reuses the
checkout's objects through ccache (the system's, or the one the scripts install into .venv/).
"""

import contextlib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from _helpers import ROOT
from conftest import DEVICE_ENV, load_factor

BASE = ROOT / "build" / "fresh-clone"


@dataclass
class FreshClone:
    src: Path  # the clone (its .venv/ inside)
    env: dict  # the fresh machine's environment the commands ran in
    demo: list  # the stdout lines of `bash scripts/run_demo.sh`
    out: Path  # the demo's output folder

    @property
    def python(self):
        return self.src / ".venv" / "bin" / "python"


def tracked_files():
    """The working tree's git-tracked files (a CI clone has exactly these)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True,
                         timeout=60).stdout
    return [name for name in out.decode().split("\0") if name]


def copy_tracked_files(src):
    for name in tracked_files():
        if os.path.isfile(ROOT / name):  # deleted in the working tree: not in a clone
            os.makedirs(src / os.path.dirname(name), exist_ok=True)
            shutil.copy2(ROOT / name, src / name)


def fresh_machine_path(bin_dir):
    """bin_dir (holding only python3, which so comes first) then the caller's PATH without any
    folder that has a `python` (pyenv's shims, a venv's bin)."""
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep)
            if d and not os.path.exists(os.path.join(d, "python"))]
    return os.pathsep.join([str(bin_dir), *kept])


def run_script(script, args, cwd, env, timeout):
    """`bash script args` in cwd; its stdout lines (a non-zero exit fails with both outputs).
    `timeout` is for an idle machine (times the load factor)."""
    proc = subprocess.run(["bash", script, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout * load_factor())
    assert proc.returncode == 0, f"{script} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.splitlines()


def _run_id():
    # Every xdist worker of a run has the controller's id; a run without xdist is one process.
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"


def _make(here, progress):
    src, bin_dir, out = here / "src", here / "bin", here / "out"
    copy_tracked_files(src)
    bin_dir.mkdir()
    # The `python3` of the fresh machine: this interpreter (a wrapper, so a venv stays a venv),
    # which has torch 2.13.0: the clone's venv uses it from where it is.
    python3 = bin_dir / "python3"
    python3.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    python3.chmod(python3.stat().st_mode | stat.S_IXUSR)
    # Nothing activated, nothing of this checkout's on the import path.
    # CCACHE_BASEDIR too: the clone's scripts make the clone ccache's base folder, so its
    # files hash as the checkout's do (relative paths) and its build reuses their objects.
    dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "QUICKSTART_START",
               "CCACHE_BASEDIR", *DEVICE_ENV}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["PATH"] = fresh_machine_path(bin_dir)
    env.setdefault("MAX_JOBS", "2")
    progress(f"bash scripts/run_demo.sh in a fresh clone (builds from nothing, "
             f"MAX_JOBS={env['MAX_JOBS']}; minutes)")
    demo = run_script("scripts/run_demo.sh", ["--small", "--out", str(out)], src, env, 3000)
    return FreshClone(src, env, demo, out)


@contextlib.contextmanager
def fresh_clone(progress):
    """The run's fresh clone, made by the first test that asks; a test has it to itself inside
    the `with` block (builds in the same clone must not run at once), the others wait."""
    BASE.mkdir(parents=True, exist_ok=True)
    here = BASE / _run_id()
    with open(BASE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = here / "clone.json"
        if made.exists():
            saved = json.loads(made.read_text())
            yield FreshClone(Path(saved["src"]), saved["env"], saved["demo"], Path(saved["out"]))
            return
        for old in BASE.iterdir():  # earlier runs' clones, and this run's failed attempt
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
        here.mkdir()
        clone = _make(here, progress)
        made.write_text(json.dumps({"src": str(clone.src), "env": clone.env, "demo": clone.demo,
                                    "out": str(clone.out)}))
        yield clone
