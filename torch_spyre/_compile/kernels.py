"""Building inductor's C++ kernels into launchable spyre kernels.

Inductor's C++ code generation (the CPU backend's) writes each fused kernel as
``extern "C" void kernel(const float* in_ptr0, float* out_ptr0, int64_t ks0)``.
For spyre the same source is compiled with a trampoline,
``spyre_kernel_entry(void** args)``, that unpacks one pointer per argument (the
convention of a CUDA launch's ``void** kernelParams``), and wrapped in
``_C._CompiledKernel``: calling it queues the kernel on the current spyre
stream over the tensors' device memory and returns at once.
"""

import ctypes

from torch._inductor.async_compile import AsyncCompile, get_compile_threads
from torch._inductor.codecache import CppCodeCache, LambdaFuture, _get_cpp_prefix_header
from torch._inductor.utils import clear_on_fresh_cache

from .. import _C

ENTRY = "spyre_kernel_entry"

# Pointer arguments: "r" for a const pointer (the kernel only reads it), "p"
# for one it writes (out_ptr, in_out_ptr); the stream sanitizer tells them apart.
# Scalar argument types inductor passes, by the kind letter _C expects.
_SCALAR_KINDS = {"int64_t": "i", "long": "i", "float": "f", "double": "d"}


@clear_on_fresh_cache
class SpyreKernelCodeCache(CppCodeCache):
    """CppCodeCache for kernels with an entry trampoline: no libtorch, the
    CPU kernels' precompiled prefix header, a cache of its own."""

    cache = {}
    cache_clear = staticmethod(cache.clear)
    cpp_compile_command_flags = {"include_pytorch": False, "shared": True}

    @classmethod
    def _get_uncompiled_header(cls, device):
        return _get_cpp_prefix_header(device)


def argument_kinds(name, argtypes):
    """The _C kind letter of each argument type, or a clear error."""
    kinds = []
    for argtype in argtypes:
        plain = argtype.replace("const ", "").strip()
        if plain.endswith("*"):
            kinds.append("r" if argtype.strip().startswith("const ") else "p")
        elif plain in _SCALAR_KINDS:
            kinds.append(_SCALAR_KINDS[plain])
        else:
            raise NotImplementedError(
                f"torch.compile on spyre: kernel {name} takes an argument of C++ type "
                f"{argtype!r}; spyre kernels take pointers, int64_t, float or double")
    return "".join(kinds)


def entry_source(argtypes):
    """The trampoline: kernel(*(T*)args[0], *(U*)args[1], ...)."""
    unpacked = ", ".join(f"*static_cast<{argtype}*>(args[{i}])" for i, argtype in enumerate(argtypes))
    return f'\nextern "C" void {ENTRY}(void** args) {{ kernel({unpacked}); }}\n'


def _launcher(name, kinds, library):
    entry = ctypes.cast(getattr(library, ENTRY), ctypes.c_void_p).value
    return _C._CompiledKernel(entry, kinds, name)


def cpp_kernel(name, argtypes, source):
    """What the spyre wrapper calls in place of ``async_compile.cpp_pybinding``."""
    kinds = argument_kinds(name, argtypes)
    code = source + entry_source(argtypes)
    if get_compile_threads() <= 1:
        return _launcher(name, kinds, SpyreKernelCodeCache.load(code, "cpu"))
    get_library = SpyreKernelCodeCache.load_async(code, "cpu", submit_fn=AsyncCompile.submit)
    return LambdaFuture(lambda: _launcher(name, kinds, get_library()))
