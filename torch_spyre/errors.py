"""Stream and device error state, as upstream torch-spyre exposes it.

When an operation fails on the device, the runtime latches the failure on its
stream: the next `synchronize()` / `query()` (or blocking copy) on that stream
raises a RuntimeError carrying the runtime's message, once; afterwards the
stream stays in the error state (`stream_get_error(s)` is `Shutdown`, new work
on it raises) while other streams keep working. These functions read that
state without raising and without consuming the pending failure.
"""

import enum

import torch

from . import _C
from .streams import _check_spyre_stream


class SpyreStreamError(enum.IntEnum):
    Success = 0
    Shutdown = 1


class SpyreDeviceState(enum.IntEnum):
    Ok = 0
    NotInitialized = 1
    StreamError = 2


def get_device_state() -> SpyreDeviceState:
    """NotInitialized while no runtime is held (before it starts, after
    free_runtime()), StreamError if any stream is latched, else Ok.

    Asked of the runtime on every call; never starts it.
    """
    return SpyreDeviceState(_C._get_device_state())


def stream_get_error(stream: torch.Stream) -> SpyreStreamError:
    """`Shutdown` once a failure was latched on `stream`, else `Success`."""
    _check_spyre_stream(stream)
    return SpyreStreamError(_C._stream_get_error(stream.stream_id, stream.device_index))


def stream_get_error_string(error) -> str:
    """"Success", "Shutdown", or "Unknown" for any other int."""
    if isinstance(error, bool) or not isinstance(error, int):
        raise TypeError(
            f"stream_get_error_string expects a SpyreStreamError or int, got {error!r} "
            f"of type {type(error).__name__}"
        )
    if not -(2**31) <= error < 2**31:
        return "Unknown"
    return _C._stream_get_error_string(int(error))
