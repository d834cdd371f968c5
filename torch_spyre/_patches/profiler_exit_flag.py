"""Feature PROFILER_EXIT: a profile that completes despite a device fault (the flag and its
reader: torch_spyre/_profiler_exit.py)."""

import functools

import torch

from .ledger import PROFILER_EXIT, check


def wrap_profiler_exit(stopping):
    """torch.autograd.profiler.profile.__exit__, with the context variable `stopping` True
    while it runs.

    Why: that __exit__ calls the device module's synchronize() before it disables the
    profiler, so a device fault raised there would leave the profiler enabled and the trace
    unwritten; torch gives a device module no way to tell that call from the program's own
    (torch.spyre.synchronize() reads the flag: _profiler_exit.stopping()). Changes: nothing
    else: torch's __exit__ is called with the same arguments and its result returned.
    Retired by: a try/finally in that __exit__ (the profiler disabled even when the
    synchronize raises), or a device-module hook for that synchronize.
    Returns whether the wrapper is in place (False, with one warning, on another torch)."""
    profile = torch.autograd.profiler.profile
    if getattr(profile.__exit__, "_torch_spyre_wraps", None) is not None:
        return True
    if not check(PROFILER_EXIT):
        return False
    original = profile.__exit__

    @functools.wraps(original)
    def __exit__(self, exc_type, exc_val, exc_tb):
        token = stopping.set(True)
        try:
            return original(self, exc_type, exc_val, exc_tb)
        finally:
            stopping.reset(token)

    __exit__._torch_spyre_wraps = original
    profile.__exit__ = __exit__
    return True
