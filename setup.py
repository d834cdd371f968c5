"""Build torch_spyre._C and the stub runtime libflex_stub.so it links against.

libflex_stub.so is built first, into the same folder as _C, with a SONAME; _C
links to it with an $ORIGIN rpath, so the installed package loads from any
folder without LD_LIBRARY_PATH.
"""

import os

# A tree with an installed .egg-info exposes the torch.backends entry point:
# importing torch below would then autoload this half-built package.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import glob  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from setuptools import setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
STUB_DIR = os.path.join("third_party", "flex_stub")
STUB_LIB = "libflex_stub.so"
STUB_FLAGS = ["-std=c++17", "-O2", "-g", "-fPIC", "-pthread", "-Wall", "-Wextra"]


def build_flex_stub(out_dir, build_temp, cxx="g++"):
    """Compile third_party/flex_stub into out_dir/libflex_stub.so (objects in parallel)."""
    sources = sorted(glob.glob(os.path.join(ROOT, STUB_DIR, "src", "*.cpp")))
    include = os.path.join(ROOT, STUB_DIR, "include")
    obj_dir = os.path.join(build_temp, "flex_stub")
    os.makedirs(obj_dir, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)

    def compile_one(src):
        obj = os.path.join(obj_dir, os.path.basename(src) + ".o")
        if not os.path.exists(obj) or os.path.getmtime(obj) < max(
            os.path.getmtime(p) for p in [src, *glob.glob(os.path.join(include, "flex", "*"))]
        ):
            subprocess.check_call([cxx, *STUB_FLAGS, "-I", include, "-c", src, "-o", obj])
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        objects = list(pool.map(compile_one, sources))
    target = os.path.join(out_dir, STUB_LIB)
    subprocess.check_call(
        [cxx, "-shared", "-pthread", f"-Wl,-soname,{STUB_LIB}", *objects, "-o", target]
    )
    return target


class BuildWithFlexStub(BuildExtension):
    def build_extensions(self):
        ext = self.extensions[0]
        out_dir = os.path.dirname(self.get_ext_fullpath(ext.name))
        build_flex_stub(out_dir, self.build_temp)
        for e in self.extensions:
            e.library_dirs.append(out_dir)
        super().build_extensions()

    def copy_extensions_to_source(self):
        # --inplace / editable installs copy only the extension modules; bring the
        # stub library along so $ORIGIN finds it next to _C.
        super().copy_extensions_to_source()
        package_dir = self.get_finalized_command("build_py").get_package_dir("torch_spyre")
        shutil.copyfile(
            os.path.join(self.build_lib, "torch_spyre", STUB_LIB),
            os.path.join(package_dir, STUB_LIB),
        )


ext = CppExtension(
    name="torch_spyre._C",
    sources=sorted(glob.glob("csrc/*.cpp")),
    include_dirs=[os.path.join(ROOT, "csrc"), os.path.join(ROOT, STUB_DIR, "include")],
    libraries=["flex_stub"],
    extra_compile_args=["-O2", "-g0", "-Wno-interference-size"],
    # Passed without a shell, so $ORIGIN reaches the linker verbatim.
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

setup(
    ext_modules=[ext],
    cmdclass={"build_ext": BuildWithFlexStub.with_options(use_ninja=True)},
    package_data={"torch_spyre": [STUB_LIB]},
)
