"""The test harness itself: a hang fails the run instead of stalling it (issue 32), a quiet run
prints a heartbeat line, and deadlines are idle-machine budgets times the load factor."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from _helpers import ROOT, wait_until
from conftest import load_factor

TESTS = str(ROOT / "test")  # conftest.py's folder


def test_a_teardown_that_hangs_after_a_failure_ends_the_run(tmp_path):
    # pytest-timeout's timer is off once a test failed; the conftest's teardown deadline is not.
    (tmp_path / "test_probe.py").write_text(textwrap.dedent("""
        import pytest, torch
        from torch_spyre.testing import Gate

        pytestmark = pytest.mark.usefixtures("drained_device")

        def test_fails_with_its_stream_gated():
            s = torch.spyre.Stream()
            gate = Gate()
            gate.block(s)           # never released: drained_device's synchronize waits forever
            raise RuntimeError("the test failed")
        """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
               SPYRE_TEST_TEARDOWN_DEADLINE="3")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120 * load_factor())
    assert proc.returncode == 1
    assert ("+++ teardown of test_probe.py::test_fails_with_its_stream_gated still running after 3.0 s"
            in proc.stderr), proc.stdout + proc.stderr
    assert "in drained_device" in proc.stderr


# The probe test waits until the heartbeat named it in the run's output (a file): the line must
# come while the test runs, whatever the machine's load.
HEARTBEAT_PROBE = """
import os, time

def test_stays_quiet_until_the_heartbeat_names_it():
    deadline = time.monotonic() + 60
    with open(os.environ["PROBE_OUTPUT"]) as out:
        while "running: test_probe.py::test_stays_quiet_until_the_heartbeat_names_it" not in out.read():
            assert time.monotonic() < deadline, "no heartbeat line within 60 s"
            time.sleep(0.05)
            out.seek(0)

def test_ends_quickly():
    pass
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_quiet_run_prints_a_heartbeat_naming_the_running_test(tmp_path, workers):
    (tmp_path / "test_probe.py").write_text(HEARTBEAT_PROBE)
    output = tmp_path / "output.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
               SPYRE_TEST_HEARTBEAT="0.5", PROBE_OUTPUT=str(output))
    with open(output, "w") as out:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p",
                               "no:cacheprovider", *workers, "--rootdir", str(tmp_path),
                               str(tmp_path / "test_probe.py")],
                              cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=120 * load_factor())
    text = output.read_text()
    assert proc.returncode == 0, text
    # (Lines before the workers collected say "0/? tests done".)
    beats = re.findall(r"^\[\d\d:\d\d\] (\d+)/(\d+|\?) tests done, running: (.*)$", text, re.M)
    naming = [beat for beat in beats
              if "test_probe.py::test_stays_quiet_until_the_heartbeat_names_it" in beat[2]]
    assert naming, text
    assert naming[0][1] == "2", text


def test_the_heartbeat_is_off_at_zero(tmp_path):
    (tmp_path / "test_probe.py").write_text("def test_passes():\n    pass\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
               SPYRE_TEST_HEARTBEAT="0")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120 * load_factor())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tests done, running:" not in proc.stdout + proc.stderr


def test_the_load_factor_is_the_load_per_core_from_1_to_4(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    for load, factor in ((0.5, 1.0), (2.5, 2.5), (100.0, 4.0)):
        monkeypatch.setattr(os, "getloadavg", lambda: (load * cores, 0.0, 0.0))
        assert load_factor() == factor


def test_a_wait_budget_is_multiplied_by_the_load_factor(monkeypatch):
    cores = len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "getloadavg", lambda: (2.5 * cores, 0.0, 0.0))
    with pytest.raises(pytest.fail.Exception, match=r"^timed out after 0\.025 s waiting for never$"):
        wait_until(lambda: False, timeout=0.01, what="never")
