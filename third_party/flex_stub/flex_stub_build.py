"""Build libflex_stub.so: used by setup.py and by the tests (no side effects on import)."""

import glob
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

STUB_DIR = os.path.dirname(os.path.abspath(__file__))
INCLUDE_DIR = os.path.join(STUB_DIR, "include")
LIBRARY = "libflex_stub.so"
FLAGS = ["-std=c++17", "-O2", "-g", "-fPIC", "-pthread", "-Wall", "-Wextra"]


def sources():
    return sorted(glob.glob(os.path.join(STUB_DIR, "src", "*.cpp")))


def newest_input_mtime():
    inputs = [*glob.glob(os.path.join(STUB_DIR, "src", "*")), *glob.glob(os.path.join(INCLUDE_DIR, "flex", "*"))]
    return max(os.path.getmtime(p) for p in inputs)


def _newest_header_mtime():
    """Headers and this script: a change to any of them recompiles every object."""
    headers = [*glob.glob(os.path.join(STUB_DIR, "src", "*.hpp")),
               *glob.glob(os.path.join(INCLUDE_DIR, "flex", "*")), os.path.abspath(__file__)]
    return max(os.path.getmtime(p) for p in headers)


def _stale(target, newest_input):
    return not os.path.exists(target) or os.path.getmtime(target) < newest_input


def build_flex_stub(out_dir, build_temp, cxx="g++", flags=FLAGS):
    """Compile the stub into out_dir/libflex_stub.so, incrementally: an object is
    rebuilt when its source or any header is newer, the library when an object is
    (MAX_JOBS compiles in parallel, as for _C)."""
    obj_dir = os.path.join(build_temp, "flex_stub")
    os.makedirs(obj_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    headers_mtime = _newest_header_mtime()

    def compile_one(src):
        obj = os.path.join(obj_dir, os.path.basename(src) + ".o")
        if _stale(obj, max(headers_mtime, os.path.getmtime(src))):
            subprocess.check_call([cxx, *flags, "-I", INCLUDE_DIR, "-c", src, "-o", obj])
        return obj

    jobs = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 2)
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        objects = list(pool.map(compile_one, sources()))
    target = os.path.join(out_dir, LIBRARY)
    if _stale(target, max(os.path.getmtime(obj) for obj in objects)):
        subprocess.check_call(
            [cxx, "-shared", "-pthread", *flags, f"-Wl,-soname,{LIBRARY}", *objects, "-o", target]
        )
    return target
