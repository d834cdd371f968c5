"""C++ unit tests of libflex_stub.so (third_party/flex_stub/tests).

A module-scoped fixture builds the test binary against the library (the
installed one, or a build in build/ when the sources are newer) into
build/flex_stub_tests/<hash of its sources and flags>/, and reuses it while
those sources did not change; each C++ test then runs in its own process,
since the runtime binds one context per process and reads its environment when
the context is created.
"""

import fcntl
import hashlib
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from _helpers import ROOT
STUB = ROOT / "third_party" / "flex_stub"
sys.path.insert(0, str(STUB))
import flex_stub_build  # noqa: E402
from conftest import DEVICE_ENV, load_factor  # noqa: E402
TEST_SOURCES = sorted((STUB / "tests").glob("test_*.cpp"))
TEST_NAMES = [
    name
    for source in TEST_SOURCES
    for name in re.findall(r"^TEST\((\w+)\)", source.read_text(), re.M)
]
CXX_FLAGS = ["-std=c++17", "-O0", "-g", "-pthread", "-Wall", "-Wextra"]  # -O0: fastest to build


CACHE = ROOT / "build" / "flex_stub_tests"


def stub_library():
    """The installed package's libflex_stub.so when it is newer than the stub's
    sources (what users run), else a build of those sources in build/ (incremental)."""
    spec = importlib.util.find_spec("torch_spyre")
    if spec is not None and spec.submodule_search_locations:
        installed = pathlib.Path(spec.submodule_search_locations[0]) / flex_stub_build.LIBRARY
        if installed.exists() and installed.stat().st_mtime >= flex_stub_build.newest_input_mtime():
            return installed
    return pathlib.Path(flex_stub_build.build_flex_stub(str(CACHE / "lib"), str(CACHE / "lib")))


def run_checked(command):
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0 or proc.stderr:
        pytest.fail(f"{' '.join(map(str, command))} failed:\n{proc.stdout}\n{proc.stderr}")


def binary_key(library):
    """What the binary is built from: the test sources, the headers they include, the flags and
    the library it links (it loads that file at run time: a rebuilt library needs no relink)."""
    digest = hashlib.sha256(repr((CXX_FLAGS, str(library))).encode())
    inputs = [*TEST_SOURCES, *sorted((STUB / "tests").glob("*.hpp")), STUB / "tests" / "main.cpp",
              STUB / "src" / "chunked_queue.hpp",  # test_chunked_queue.cpp tests it directly
              *sorted((STUB / "include" / "flex").glob("*"))]
    for path in inputs:
        digest.update(str(path.relative_to(STUB)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def test_binary():
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "build.lock", "w") as lock:
        # One build at a time: xdist's workers each run some of these tests, and the first
        # worker's build serves the others.
        fcntl.flock(lock, fcntl.LOCK_EX)
        return build_test_binary()


def build_test_binary():
    library = stub_library()
    cached = CACHE / binary_key(library) / "flex_stub_tests"
    if cached.exists():
        return cached
    out_dir = CACHE / f"building-{os.getpid()}"
    out_dir.mkdir(parents=True, exist_ok=True)
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
    cached.parent.mkdir(parents=True, exist_ok=True)
    os.replace(binary, cached)  # atomic: a concurrent run sees the whole binary or none
    shutil.rmtree(out_dir, ignore_errors=True)
    return cached


def test_names_match_the_binary(test_binary):
    listed = subprocess.run([test_binary, "--list"], capture_output=True, text=True, check=True)
    assert sorted(listed.stdout.split()) == sorted(TEST_NAMES)


@pytest.mark.parametrize("name", TEST_NAMES)
def test_flex_stub(test_binary, name):
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    proc = subprocess.run([test_binary, name], capture_output=True, text=True,
                          timeout=60 * load_factor(), env=env)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
