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
import sys  # noqa: E402
import sysconfig  # noqa: E402

from setuptools import Extension, setup  # noqa: E402

try:
    import torch  # noqa: E402
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    # The build compiles against the installed torch (pip's build isolation is off, or this
    # is a direct setup.py run): say what to install instead of a bare ModuleNotFoundError.
    sys.exit(f"torch_spyre builds against torch 2.13: install it first into this Python "
             f"({sys.executable}): `{sys.executable} -m pip install torch==2.13.0`, "
             f"or run `bash scripts/run_tests.sh`, which sets up a virtual environment")
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
STUB_DIR = os.path.join("third_party", "flex_stub")
sys.path.insert(0, os.path.join(ROOT, STUB_DIR))
from flex_stub_build import LIBRARY as STUB_LIB, build_flex_stub  # noqa: E402


class BuildWithFlexStub(BuildExtension):
    def finalize_options(self):
        super().finalize_options()
        if getattr(self, "editable_mode", False):
            # pip install -e builds in a fresh temporary folder each time; keep the
            # objects in the tree's build/ (where build_ext --inplace puts them) so
            # ninja recompiles only what changed.
            plat = f"{sysconfig.get_platform()}-{sys.implementation.cache_tag}"
            self.build_temp = os.path.join(ROOT, "build", f"temp.{plat}")

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
        source = os.path.join(self.build_lib, "torch_spyre", STUB_LIB)
        target = os.path.join(package_dir, STUB_LIB)
        if os.path.exists(target) and os.stat(target).st_mtime_ns == os.stat(source).st_mtime_ns:
            return
        # A new file, not an in-place rewrite: running processes have the old one mapped.
        shutil.copy2(source, target + ".tmp")
        os.replace(target + ".tmp", target)


# torch_spyre._C: product code only, one folder per layer (docs/development.md).
LAYERS = ("runtime", "device", "launch", "aten", "graphs", "profiler", "python")
native = CppExtension(
    name="torch_spyre._C",
    sources=sorted(src for layer in LAYERS for src in glob.glob(f"csrc/{layer}/*.cpp")),
    include_dirs=[os.path.join(ROOT, "csrc"), os.path.join(ROOT, STUB_DIR, "include"),
                  # Kineto's headers, for the profiler plugin (csrc/profiler/activity_profiler.cpp).
                  os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
    libraries=["flex_stub"],
    extra_compile_args=["-O2", "-g0", "-Wno-interference-size"],
    # Passed without a shell, so $ORIGIN reaches the linker verbatim.
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

# torch_spyre._testing: the emulator's test facilities (flex/testing.hpp). No
# torch: pybind11 (shipped in torch's include folder) and the stub only.
TORCH_INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")
testing = Extension(
    name="torch_spyre._testing",
    sources=["csrc/testing/module.cpp"],
    include_dirs=[os.path.join(ROOT, STUB_DIR, "include"), TORCH_INCLUDE],
    libraries=["flex_stub"],
    language="c++",
    extra_compile_args=["-O2", "-g0", "-std=c++17", "-fvisibility=hidden"],
    extra_link_args=["-Wl,-rpath,$ORIGIN"],
)

setup(
    ext_modules=[native, testing],
    cmdclass={"build_ext": BuildWithFlexStub.with_options(use_ninja=True)},
    package_data={"torch_spyre": [STUB_LIB]},
)
