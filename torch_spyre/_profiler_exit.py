"""The profiler's stop, made known to torch.spyre.synchronize() (docs/profiling.md, "Faults").

torch.autograd.profiler.profile.__exit__ calls the device module's synchronize() (here
torch.spyre.synchronize()) *before* it disables the profiler: a device fault raised there would
leave the profiler enabled and the trace unwritten. torch 2.13 gives a device module no way to
tell that call from the program's own, so this module wraps that __exit__ to set a context flag
while it runs (`stopping()`); synchronize() then waits without raising. The wrapper changes
nothing else: it calls torch's __exit__ with the same arguments and returns what it returns.

Checked before it is applied: the source of the __exit__ must be torch 2.13.0's (the hash
below, computed as torch_spyre._patches computes its targets'). On another torch the wrapper is
not installed and one RuntimeWarning names the torch version and the feature: a fault pending
when a profile stops then raises from the profiler's __exit__, as any synchronize does.
Upstream change that would retire it: the profiler disabling itself even when the device
synchronize in __exit__ raises (a try/finally), or a device-module hook for that synchronize.
"""

import contextvars
import functools
import hashlib
import inspect
import warnings

import torch

WRITTEN_AGAINST = "2.13.0"
FEATURE = "a profile that completes despite a device fault"
TARGET = "torch.autograd.profiler.profile.__exit__"
TARGET_HASH = "e6ae36adb109f87c"

_stopping = contextvars.ContextVar("torch_spyre_profiler_stopping", default=False)


def stopping() -> bool:
    """Whether the calling context is inside the torch profiler's __exit__."""
    return _stopping.get()


def fingerprint(function) -> str:
    """The first 16 hex digits of the SHA-256 of the function's source."""
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def install() -> bool:
    """Wrap the profiler's __exit__ (once). False, with one warning, on another torch."""
    profile = torch.autograd.profiler.profile
    original = profile.__exit__
    if getattr(original, "_torch_spyre_wraps", None) is not None:
        return True
    try:
        found = fingerprint(original)
    except (OSError, TypeError):
        found = None
    if found != TARGET_HASH:
        warnings.warn(
            f"torch_spyre: {FEATURE} is disabled: in torch {torch.__version__}, {TARGET} differs "
            f"from torch {WRITTEN_AGAINST}'s, which torch_spyre patches for it and was written "
            "against",
            RuntimeWarning,
            stacklevel=2,
        )
        return False

    @functools.wraps(original)
    def __exit__(self, exc_type, exc_val, exc_tb):
        token = _stopping.set(True)
        try:
            return original(self, exc_type, exc_val, exc_tb)
        finally:
            _stopping.reset(token)

    __exit__._torch_spyre_wraps = original
    profile.__exit__ = __exit__
    return True
