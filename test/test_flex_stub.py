"""C++ unit tests of libflex_stub.so (third_party/flex_stub/tests).

A module-scoped fixture builds the test binary against the library (the
installed one, or a fresh build when the sources are newer); each C++ test then runs in its own process, since
the runtime binds one context per process and reads its environment when the
context is created.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
STUB = ROOT / "third_party" / "flex_stub"
sys.path.insert(0, str(STUB))
import flex_stub_build  # noqa: E402
from conftest import DEVICE_ENV  # noqa: E402
TEST_SOURCES = sorted((STUB / "tests").glob("test_*.cpp"))
TEST_NAMES = [
    name
    for source in TEST_SOURCES
    for name in re.findall(r"^TEST\((\w+)\)", source.read_text(), re.M)
]
CXX_FLAGS = ["-std=c++17", "-O0", "-g", "-pthread", "-Wall", "-Wextra"]  # -O0: fastest to build


def stub_library(tmp_dir):
    """The installed package's libflex_stub.so when it is newer than the stub's
    sources (what users run), else a fresh build of those sources."""
    spec = importlib.util.find_spec("torch_spyre")
    if spec is not None and spec.submodule_search_locations:
        installed = pathlib.Path(spec.submodule_search_locations[0]) / flex_stub_build.LIBRARY
        if installed.exists() and installed.stat().st_mtime >= flex_stub_build.newest_input_mtime():
            return installed
    return pathlib.Path(flex_stub_build.build_flex_stub(str(tmp_dir), str(tmp_dir / "build")))


def run_checked(command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 or proc.stderr:
        pytest.fail(f"{' '.join(map(str, command))} failed:\n{proc.stdout}\n{proc.stderr}")


@pytest.fixture(scope="module")
def test_binary(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("flex_stub")
    library = stub_library(out_dir)
    objects = []
    compile_commands = []
    for source in [*TEST_SOURCES, STUB / "tests" / "main.cpp"]:
        obj = out_dir / (source.name + ".o")
        objects.append(obj)
        include_flags = ["-I", STUB / "include", "-I", STUB / "tests"]
        compile_commands.append(["g++", *CXX_FLAGS, *include_flags, "-c", source, "-o", obj])
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run_checked, compile_commands))
    binary = out_dir / "flex_stub_tests"
    run_checked(
        ["g++", "-pthread", *objects, library, f"-Wl,-rpath,{library.parent}", "-o", binary]
    )
    return binary


def test_names_match_the_binary(test_binary):
    listed = subprocess.run([test_binary, "--list"], capture_output=True, text=True, check=True)
    assert sorted(listed.stdout.split()) == sorted(TEST_NAMES)


@pytest.mark.parametrize("name", TEST_NAMES)
def test_flex_stub(test_binary, name):
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    proc = subprocess.run([test_binary, name], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
