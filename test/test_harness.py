"""The test harness itself: a hang fails the run instead of stalling it (issue 32)."""

import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]),
               SPYRE_TEST_TEARDOWN_DEADLINE="3")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert ("+++ teardown of test_probe.py::test_fails_with_its_stream_gated still running after 3.0 s"
            in proc.stderr), proc.stdout + proc.stderr
    assert "in drained_device" in proc.stderr
