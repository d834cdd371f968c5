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


def build_flex_stub(out_dir, build_temp, cxx="g++", flags=FLAGS):
    """Compile the stub into out_dir/libflex_stub.so (objects in parallel, reused when fresh)."""
    obj_dir = os.path.join(build_temp, "flex_stub")
    os.makedirs(obj_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    inputs_mtime = newest_input_mtime()

    def compile_one(src):
        obj = os.path.join(obj_dir, os.path.basename(src) + ".o")
        if not os.path.exists(obj) or os.path.getmtime(obj) < inputs_mtime:
            subprocess.check_call([cxx, *flags, "-I", INCLUDE_DIR, "-c", src, "-o", obj])
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, sources()))
    target = os.path.join(out_dir, LIBRARY)
    subprocess.check_call(
        [cxx, "-shared", "-pthread", *flags, f"-Wl,-soname,{LIBRARY}", *objects, "-o", target]
    )
    return target
