"""Shared helpers. The runtime binds one device once per process, so anything
that depends on how the runtime starts runs in a fresh interpreter."""

import os
import subprocess
import sys
import tempfile
import textwrap

import pytest

# Variables that change device enumeration, binding or thread placement; cleared for subprocesses
# so each test states exactly what it sets.
DEVICE_ENV = (
    "SPYRE_DEVICES",
    "AIU_WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "LOCAL_RANK",
    "FLEX_STUB_CARDS",
    "FLEX_STUB_ENGINES",
    "FLEX_STUB_DMA_GBPS",
    "FLEX_STUB_DMA_ENGINES",
    "FLEX_STUB_MEMORY_BYTES",
    "FLEX_STUB_FAULT_AFTER",
    "FLEX_STUB_TRACE",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "SPYRE_PIN_ENGINE_TEAMS",
    "OMP_PROC_BIND",
    "GOMP_CPU_AFFINITY",
)


def run_python(code, env=None, timeout=120, check=True):
    """Run `code` in a fresh interpreter (cwd: an empty temp dir).

    Returns the CompletedProcess; with check=True a non-zero exit fails the
    test showing stdout and stderr.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    full_env.update(env or {})
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if check and proc.returncode != 0:
        pytest.fail(
            f"subprocess exited {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


# The test process itself runs with no device variables set: it binds device 0.
for _name in DEVICE_ENV:
    os.environ.pop(_name, None)
