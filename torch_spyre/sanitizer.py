"""The stream sanitizer: reports device accesses that race across streams
(docs/sanitizer.md).

Every operation queued on a spyre stream (eager ops, copies, fills, compiled
kernels) is checked at the call, on the host, against the earlier accesses to
the same device bytes: two accesses, at least one a write, that no stream
order, event, `wait_stream` or host wait orders are a race. `mode="raise"` raises
`UnsynchronizedAccessError` from the call that launched the later access
(nothing is queued); `mode="warn"` prints the same report to stderr and goes
on. `TORCH_SPYRE_SANITIZER=1` in the environment enables it at `import torch`
(`warn`: in warn mode). `SPYRE_HAZARD_TRACKER=1` uses the same tracking to order
racing launches (a wait on the streams they race with) instead of reporting.

The host side of copies: a CPU operation that reads the pinned destination of a
`non_blocking` D2H, or writes the pinned source of a `non_blocking` H2D, before
the host waited for the copy, is reported the same way. CPU operations are seen
in C++ (csrc/launch/sanitizer_host.cpp); `Tensor.numpy()` and `Tensor.tolist()`
read the memory without the dispatcher and are wrapped while the sanitizer is
on (torch_spyre/_patches/sanitizer_host_reads.py).
"""

import os
import warnings

import torch

from . import _C, _patches

__all__ = ["UnsynchronizedAccessError", "enable", "disable", "is_enabled"]

_MODES = {"raise": 1, "warn": 2}
_ORDER = 3  # the hazard tracker (SPYRE_HAZARD_TRACKER=1)


class UnsynchronizedAccessError(RuntimeError):
    """Two accesses to the same device bytes, at least one a write, that
    nothing orders (the message names both, where each was launched, and a fix)."""


def enable(mode: str = "raise") -> None:
    """Start checking every launch (forgets nothing while on)."""
    if not isinstance(mode, str):  # checked first: `in` would hash an unhashable value
        raise TypeError(f"sanitizer.enable: mode must be a str, one of {sorted(_MODES)}, "
                        f"got {mode!r} of type {type(mode).__name__}")
    if mode not in _MODES:
        raise ValueError(f"sanitizer mode must be one of {sorted(_MODES)}, got {mode!r}")
    _C._sanitizer_set_mode(_MODES[mode])
    _patches.wrap_host_reads()


def disable() -> None:
    """Stop checking, and forget every recorded access."""
    _C._sanitizer_set_mode(0)
    _patches.unwrap_host_reads()


def is_enabled() -> bool:
    """True in "raise" or "warn" mode (not for the hazard tracker, which reports nothing)."""
    return _C._sanitizer_mode() in (_MODES["raise"], _MODES["warn"])


# SPYRE_HAZARD_TRACKER's values (upstream's boolean spellings, any case); unset or empty is off.
_HAZARD_ON = ("1", "true", "t", "yes", "y")
_HAZARD_OFF = ("", "0", "false", "f", "no", "n")


def _hazard_tracker_from_environment() -> bool:
    """Whether SPYRE_HAZARD_TRACKER turns the hazard tracker on. Any other value warns
    and leaves it off: a typo must not make `import torch` fail."""
    raw = os.environ.get("SPYRE_HAZARD_TRACKER", "")
    value = raw.strip().lower()
    if value in _HAZARD_ON:
        return True
    if value not in _HAZARD_OFF:
        warnings.warn(
            f"SPYRE_HAZARD_TRACKER={raw!r} is not one of {'/'.join(_HAZARD_ON)} (on) or "
            f"{'/'.join(_HAZARD_OFF[1:])} (off), in any case; the hazard tracker stays off",
            RuntimeWarning, stacklevel=2)
    return False


def _enable_from_environment() -> None:
    """TORCH_SPYRE_SANITIZER: 1 raises, warn warns, 0 or unset or empty is off.
    SPYRE_HAZARD_TRACKER=1 (or true/t/yes/y; upstream torch-spyre's switch): the hazard
    tracker, which makes each launch wait for the streams it races with instead of
    reporting them."""
    value = os.environ.get("TORCH_SPYRE_SANITIZER", "")
    if value not in ("", "0", "1", "warn"):
        raise ValueError(f"TORCH_SPYRE_SANITIZER must be 0, 1 or warn, got {value!r}")
    hazard = _hazard_tracker_from_environment()
    if value in ("1", "warn") and hazard:
        raise ValueError("TORCH_SPYRE_SANITIZER and SPYRE_HAZARD_TRACKER are both set: the "
                         "sanitizer reports races, the hazard tracker orders them; set one")
    if value in ("1", "warn"):
        enable("raise" if value == "1" else "warn")
    elif hazard:
        _C._sanitizer_set_mode(_ORDER)  # orders nothing on the host: no wrapping
