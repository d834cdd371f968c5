"""The profiler's stop, made known to torch.spyre.synchronize() (docs/profiling.md, "Faults").

torch.autograd.profiler.profile.__exit__ calls the device module's synchronize() (here
torch.spyre.synchronize()) *before* it disables the profiler: a device fault raised there would
leave the profiler enabled and the trace unwritten. torch 2.13 gives a device module no way to
tell that call from the program's own, so that __exit__ is wrapped to set a context flag while
it runs (`stopping()`); synchronize() then waits without raising. The wrapper, its check against
torch 2.13.0 and the upstream change that would retire it are in torch_spyre/_patches/
(profiler_exit_flag.py's `wrap_profiler_exit`): on another torch it is not installed and one
RuntimeWarning names the torch version and the feature; a fault pending when a profile stops
then raises from the profiler's __exit__, as any synchronize does.
"""

import contextvars

from . import _patches

FEATURE = _patches.PROFILER_EXIT
TARGET = "torch.autograd.profiler.profile.__exit__"
TARGET_HASH = _patches.TARGETS[FEATURE][TARGET]
fingerprint = _patches.fingerprint

_stopping = contextvars.ContextVar("torch_spyre_profiler_stopping", default=False)


def stopping() -> bool:
    """Whether the calling context is inside the torch profiler's __exit__."""
    return _stopping.get()


def install() -> bool:
    """Wrap the profiler's __exit__ (once). False, with one warning, on another torch."""
    return _patches.wrap_profiler_exit(_stopping)
