"""The README's two Quick-start commands on a fresh machine: in a fresh clone of the checkout
(its git-tracked files), with a PATH that has `python3` but no `python` and no active virtual
environment, `bash scripts/run_demo.sh` creates the project's .venv/, builds torch_spyre into it
with the build's progress on the terminal and runs the demo; `bash scripts/run_tests.sh` then
reuses that .venv/ (no second venv, an in-place rebuild) and runs pytest with it, naming each
file and ending with the durations summary.

The clone and its first command are test/_fresh_clone.py's, made once per run (the wheel test
builds from the same clone). The `python3` on that PATH is this interpreter, which has torch
2.13.0: the scripts' venv uses it from where it is instead of installing it again. Slow: the
clone builds the whole extension (ccache, the system's or the one the scripts install into
.venv/, makes that cheaper: the clone's files hash relative to its folder, as the checkout's do).
A missing prerequisite stops the setup at once with one line (fast tests, nothing built).
"""

import os
import re
import shutil
import subprocess

import pytest

from _fresh_clone import fresh_clone, run_script
from _helpers import ROOT
from conftest import load_factor

PHASE = re.compile(r"^\[\d+:\d\d\] ")  # the scripts' phase lines: "[m:ss] what"


def phases(lines):
    return [PHASE.sub("", line) for line in lines if PHASE.match(line)]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # a clean build: minutes
def test_readme_commands_on_a_fresh_machine(progress):
    if shutil.which("git") is None or not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("needs a git checkout")
    with fresh_clone(progress) as clone:
        assert shutil.which("python", path=clone.env["PATH"]) is None
        demo = clone.demo
        steps = phases(demo)
        assert steps[0].startswith("creating the virtual environment .venv (")
        assert steps[1] == f"using the torch 2.13.0 installed in " + os.path.dirname(
            os.path.dirname(__import__("torch").__file__))
        assert steps[2] == "installing torch 2.13.0 and the build and test tools into .venv (pip)"
        assert steps[3].startswith("building torch_spyre and installing it editable into .venv")
        assert steps[4:] == ["torch_spyre is ready in .venv",
                             "running the streams demo (examples/streams_demo.py)", "done"]
        # The build's progress: one line per compiled file, ninja's [n/m] then the file.
        built = [line.split() for line in demo if re.match(r"^    \[\d+/\d+\] ", line)]
        assert built and all(re.fullmatch(r"csrc/\w+/\w+\.cpp", file) for _, file in built), demo
        assert ["[1/1]", "csrc/testing/module.cpp"] in built, built  # torch_spyre._testing
        total = int(built[0][0].split("/")[1][:-1])  # torch_spyre._C: every file, counted
        assert built[:total] == [[f"[{n}/{total}]", built[n - 1][1]] for n in range(1, total + 1)]
        assert any(re.search(r"results identical: True", line) for line in demo), demo
        assert sorted(os.listdir(clone.out)) == ["streams_demo.png", "streams_demo_trace.json"]
        assert clone.python.is_file()

        progress("bash scripts/run_tests.sh (a few files) reusing the clone's .venv")
        tests = run_script("scripts/run_tests.sh", ["test/product/test_docs.py", "-p", "no:cacheprovider"],
                           clone.src, clone.env, 600)
        assert phases(tests) == [
            "building torch_spyre in place (MAX_JOBS=%s; only what changed)" % clone.env["MAX_JOBS"],
            "torch_spyre is ready in .venv",
            f"running the test suite (both tiers, {min(max(len(os.sched_getaffinity(0)), 2), 4)} pytest-xdist workers)",
            "tests finished (pytest exit status 0)",
        ]
        assert any(line.startswith("test/product/test_docs.py ") for line in tests), tests  # the file runs
        assert any(re.search(r"=+ slowest 30 durations =+", line) for line in tests), tests
        assert re.search(r"=+ \d+ passed in ", tests[-2]), tests


# A missing prerequisite stops setup_env.sh before it creates or installs anything, with one
# line on stderr naming what to install (fast: nothing is built).
def scripts_copy(tmp_path):
    shutil.copytree(os.path.join(ROOT, "scripts"), tmp_path / "scripts")
    return str(tmp_path / "scripts" / "setup_env.sh")


@pytest.mark.parametrize("cxx,message", [
    ("no-such-compiler", "error: no C++ compiler (no-such-compiler) on PATH: install one that supports "
                         "C++20, e.g. GCC 10 or newer (Debian: apt-get install g++)"),
    ("false", "error: false cannot compile C++20 (torch's extensions build with -std=c++20): install "
              "GCC 10 or newer (Debian: apt-get install g++)"),
])
def test_a_missing_compiler_is_one_line_before_anything_is_installed(tmp_path, cxx, message):
    script = scripts_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["CXX"] = cxx
    proc = subprocess.run(["bash", script], env=env, capture_output=True, text=True,
                          timeout=120 * load_factor())
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", message + "\n")
    assert sorted(os.listdir(tmp_path)) == ["scripts"]  # no .venv, no build/


def test_no_python3_is_one_line(tmp_path):
    script = scripts_copy(tmp_path)
    bin_dir = tmp_path / "bin"  # the tools the script runs before its first check, no python3
    bin_dir.mkdir()
    for tool in ("dirname", "date"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    proc = subprocess.run([shutil.which("bash"), script], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60 * load_factor())
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        1, "", "error: python3 not found on PATH: install Python 3.11 (Debian: apt-get install "
               "python3 python3-venv python3-dev)\n")
