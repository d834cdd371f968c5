"""Issue 33, item 4: the project's own programs run under the stream sanitizer report nothing.
A report here is a real race in a test (order it; or, if the test reads unfinished work on
purpose, mark it `races`) or a sanitizer bug."""

import importlib.util
import os
import subprocess
import sys

import pytest

from _helpers import ROOT, torchrun
from conftest import DEVICE_ENV


def sanitized_env():
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    return dict(env, TORCH_SPYRE_SANITIZER="1")


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_inner_tier_reports_nothing(progress):
    progress("running the inner tier again under TORCH_SPYRE_SANITIZER=1 (minutes)")
    # Spread over two pytest-xdist workers where installed (the README's setup installs it).
    workers = ["-n", "2"] if importlib.util.find_spec("xdist") else []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
         *workers, str(ROOT / "test")],
        cwd=ROOT, env=sanitized_env(), capture_output=True, text=True, timeout=1400)
    assert "unsynchronized access" not in proc.stdout + proc.stderr, proc.stdout[-20000:]
    assert proc.returncode == 0, proc.stdout[-20000:] + proc.stderr[-5000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_demo_reports_nothing(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "streams_demo.py"), "--small",
                           "--out", str(tmp_path)],
                          cwd=tmp_path, env=sanitized_env(), capture_output=True, text=True, timeout=500)
    assert "unsynchronized access" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_torchrun_demo_reports_nothing(tmp_path):
    script = (ROOT / "examples" / "torchrun_demo.py").read_text()
    proc = torchrun(tmp_path, script, env={"TORCH_SPYRE_SANITIZER": "1"}, timeout=500)
    assert "unsynchronized access" not in proc.stderr, proc.stderr
