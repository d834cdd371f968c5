"""Issue 30, item 1: torch_spyre installs as a wheel, the way users install it.

In a fresh clone (a copy of the git-tracked files only, test/_fresh_clone.py), a wheel is
built (`pip wheel --no-build-isolation --no-deps`, by the clone's venv: the build reuses its
torch, which is the running interpreter's), installed into a fresh venv that sees this
interpreter's packages (torch, numpy; no network: `--no-index`), and the
venv's python, started in a folder outside the checkout, runs `import torch`,
an eager op, a torch.compile'd function, a profiler run with device activity
and `torch.spyre.testing`. The venv's own torch_spyre must be the one
imported (asserted), not an editable install of a checkout this interpreter may
also have. The venv sees the packages of the running interpreter also when that
is itself a venv (a .pth, not `--system-site-packages`).

Slow: the clone's first Quick-start command compiled the whole extension from nothing (several
minutes on 2 shared cores), once per run for this test and the Quick-start test; the wheel's
build finds those objects up to date and links.
"""

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

from _fresh_clone import fresh_clone, tracked_files
from _helpers import ROOT
from conftest import load_factor

SMOKE = """
import os, sys
import torch
import torch_spyre
venv = sys.argv[1]
# The wheel's package, not the editable checkout nor PYTHONPATH's.
assert os.path.realpath(torch_spyre.__file__).startswith(os.path.realpath(venv) + os.sep), torch_spyre.__file__
assert torch.spyre is torch_spyre
print("where", os.path.relpath(os.path.dirname(torch_spyre.__file__), venv))

x = torch.arange(6.0, device="spyre").reshape(2, 3)
print("eager", (x * 2 + 1).cpu().tolist())

@torch.compile
def f(a):
    return torch.relu(a - 2) * 3
print("compiled", f(x).cpu().tolist())

from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
    torch.spyre._sleep(1)
    torch.spyre.synchronize()
print("profiler", sorted({e.device_type.name for e in prof.events()}),
      "delay Cmpt Exec" in {e.name for e in prof.events()})

import torch.spyre.testing
import torch_spyre.testing
print("testing", torch.spyre.testing is torch_spyre.testing, hasattr(torch_spyre.testing, "Gate"))
"""


def make_venv_seeing_this_interpreters_packages(venv, env):
    """A fresh venv whose python also imports the packages of the running interpreter (torch,
    numpy), whether that is a system python or itself a venv: `--system-site-packages` would
    give a venv's *base* interpreter's site-packages instead. A .pth names the folders that
    hold them; being plain paths, their own .pth files (an editable checkout's finder) are not
    run. Returns the venv's python."""
    import numpy
    import torch

    run([sys.executable, "-m", "venv", str(venv)], timeout=300, env=env)
    python = str(venv / "bin" / "python")
    site_packages = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        timeout=60, env=env).stdout.strip()
    folders = dict.fromkeys(os.path.dirname(os.path.dirname(m.__file__)) for m in (torch, numpy))
    with open(os.path.join(site_packages, "running-interpreter.pth"), "w") as pth:
        pth.write("".join(folder + "\n" for folder in folders))
    return python


def run(cmd, timeout, **kwargs):
    """`timeout` is for an idle machine (times the load factor)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * load_factor(),
                          **kwargs)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
@pytest.mark.timeout(3600)  # the clone's clean build: 3-4 min on 2 quiet cores, 15+ under heavy load
def test_wheel_installs_into_a_fresh_venv_and_works(tmp_path, progress):
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("needs a git checkout")
    with fresh_clone(progress) as clone:
        # The fresh machine's environment; ninja (in the clone's venv) on PATH, as
        # scripts/setup_env.sh puts it for the clone's build: torch's build then reuses its objects.
        env = dict(clone.env)
        ninja = run([str(clone.python), "-c", "import ninja; print(ninja.BIN_DIR)"], timeout=60,
                    env=env).stdout.strip()
        env["PATH"] = ninja + os.pathsep + env["PATH"]
        dist = tmp_path / "dist"
        progress("building the wheel in the fresh clone (its objects are built: links only)")
        run([str(clone.python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
             "--disable-pip-version-check", "-w", str(dist), str(clone.src)], timeout=2400, env=env)
    wheels = list(dist.glob("torch_spyre-*.whl"))
    assert len(wheels) == 1, wheels
    with zipfile.ZipFile(wheels[0]) as wheel:
        shipped = {name for name in wheel.namelist() if name.startswith("torch_spyre/")}
    # Every tracked module ships (no hand-kept package list), with the native parts.
    expected = {name for name in tracked_files() if name.startswith("torch_spyre/")}
    assert expected <= shipped, sorted(expected - shipped)
    for native in ("torch_spyre/libflex_stub.so", "torch_spyre/_C", "torch_spyre/_testing"):
        assert any(name.startswith(native) for name in shipped), (native, sorted(shipped))

    venv = tmp_path / "venv"
    progress("installing the wheel into a fresh venv")
    python = make_venv_seeing_this_interpreters_packages(venv, env)
    run([python, "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall",
         "--disable-pip-version-check", str(wheels[0])], timeout=600, env=env)

    progress("running the smoke test with the venv's python")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    proc = run([python, "-c", textwrap.dedent(SMOKE), str(venv)], timeout=600, env=env,
               cwd=outside)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert proc.stdout.splitlines() == [
        f"where lib/{version}/site-packages/torch_spyre",
        "eager [[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]]",
        "compiled [[0.0, 0.0, 0.0], [3.0, 6.0, 9.0]]",
        "profiler ['CPU', 'SPYRE'] True",  # PrivateUse1 renamed to spyre
        "testing True True",
    ], proc.stderr


# Without torch, setup.py says what to install first (pip shows it inside its
# metadata-generation-failed message) instead of a bare ModuleNotFoundError.
NO_TORCH = """
import runpy, sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
sys.argv = ["setup.py", "--version"]
runpy.run_path("setup.py", run_name="__main__")
"""


def test_setup_py_without_torch_says_what_to_install():
    proc = subprocess.run([sys.executable, "-c", NO_TORCH], cwd=ROOT, capture_output=True,
                          text=True, timeout=120 * load_factor())
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    assert proc.stderr == (
        f"torch_spyre builds against torch 2.13: install it first into this Python "
        f"({sys.executable}): `{sys.executable} -m pip install torch==2.13.0`, "
        f"or run `bash scripts/run_tests.sh`, which sets up a virtual environment\n")
