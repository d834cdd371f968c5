"""Spyre streams: torch.spyre.Stream and the current-stream functions.

A spyre stream is a torch.Stream: it works with `with stream:`,
torch.accelerator.set_stream/current_stream, torch.Event and wait_stream.
Streams come from a pool of 32 low- and 32 high-priority streams handed out
round robin (docs/streams.md); the current stream is per thread.
"""

import math
import numbers

import torch

from . import _C
from ._device import DEVICE_TYPE, _device_index

# Pool ids and limits are defined once, in C++ (csrc/runtime/stream.h).
_FIRST_HIGH_PRIORITY_ID = _C._first_high_priority_stream_id
_MAX_SLEEP_MS = _C._max_sleep_ms  # int64 nanoseconds of device time: about 106 days
_LAST_HIGH_PRIORITY_ID = _C._num_pool_stream_ids - 1


class Stream(torch.Stream):
    """A stream of the spyre device.

    Args:
        device: int, str, torch.device or None (the current device).
        priority: 0 or positive for the low-priority pool, negative for the
            high-priority pool (the `priority` property reports 0 or -1).
    """

    def __new__(cls, device=None, priority=0):
        if type(priority) is not int:  # bool and float are rejected too
            raise TypeError(
                f"priority must be an int, got {priority!r} of type {type(priority).__name__}"
            )
        # Only the sign matters (< 0: high-priority pool); clamping keeps any
        # int in range of the C++ int, as CUDA clamps its priorities.
        stream_id, index = _C._get_stream_from_pool(_device_index(device), -1 if priority < 0 else 0)
        return torch.Stream.__new__(cls, stream_id, index, DEVICE_TYPE)

    # torch.Stream.synchronize, without releasing the GIL when the stream is
    # already idle (csrc/python/stream_bindings.cpp).
    synchronize = _C._stream_synchronize

    @classmethod
    def _wrap(cls, key):
        """The Stream for a (stream_id, device_index) pair, without a pool hand-out."""
        return torch.Stream.__new__(cls, key[0], key[1], DEVICE_TYPE)

    def record_event(self, event=None):
        """Record `event` (a new torch.spyre.Event if None) on this stream and return it.

        torch.Stream.record_event accepts only an exact torch.Event; this also
        takes torch.spyre.Event.
        """
        if event is None:
            from .events import Event

            event = Event()
        elif not isinstance(event, torch.Event):
            raise TypeError(
                f"expected a torch.Event, got {event!r} of type {type(event).__name__}"
            )
        event.record(self)
        return event

    @property
    def priority(self) -> int:
        return -1 if _FIRST_HIGH_PRIORITY_ID <= self.stream_id <= _LAST_HIGH_PRIORITY_ID else 0

    def __repr__(self):
        return (
            f"torch.spyre.Stream(device=spyre:{self.device_index}, id={self.stream_id}, "
            f"priority={self.priority})"
        )


def _check_spyre_stream(stream):
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"expected a torch.Stream, got {stream!r} of type {type(stream).__name__}")
    if stream.device_type != DEVICE_TYPE:
        raise ValueError(f"expected a spyre stream, got a stream of device {stream.device}")


class StreamContext:
    """Makes `stream` current on entry and restores the previous stream on exit.

    A new context per `with` keeps the saved stream out of the (shared) stream
    object, so two threads entering the same stream do not restore each
    other's streams. `None` makes it a no-op.
    """

    __slots__ = ("stream", "_previous")

    def __init__(self, stream):
        if stream is not None:
            _check_spyre_stream(stream)
        self.stream = stream
        self._previous = None

    def __enter__(self):
        if self.stream is not None:
            self._previous = _C._set_current_stream(self.stream.stream_id, self.stream.device_index)
        return self.stream

    def __exit__(self, *exc):
        if self._previous is not None:
            _C._set_current_stream(*self._previous)
            self._previous = None
        return False


def stream(stream) -> StreamContext:
    """Context manager that runs its body on `stream` (None: leave the current stream)."""
    if stream is not None and torch.compiler.is_compiling():
        # Dynamo traces torch.Stream's own context manager into stream-annotated
        # graphs (docs/compile.md); it cannot evaluate the device check.
        return stream
    return StreamContext(stream)


def current_stream(device=None) -> Stream:
    """The calling thread's current stream (the default stream until set)."""
    if torch.compiler.is_compiling():
        return torch.accelerator.current_stream() if device is None else \
            torch.accelerator.current_stream(device)  # what dynamo traces
    return Stream._wrap(_C._current_stream(_device_index(device)))


def default_stream(device=None) -> Stream:
    """The default stream (id 0)."""
    return Stream._wrap(_C._default_stream(_device_index(device)))


def host_compute_stream(device=None) -> Stream:
    """The next host-compute stream of `device` (ids 65..65+N-1, round robin).

    N is TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS (default 4, 1 to 8); these
    streams exist from the runtime's start and have normal priority
    (docs/streams.md). torch_spyre._C.host_compute_stream returns the same
    stream as upstream's bare stream object.
    """
    native = _C.host_compute_stream(_device_index(device))
    return Stream._wrap((native.id(), native.device().index))


def set_stream(stream) -> None:
    """Make `stream` the calling thread's current stream."""
    _check_spyre_stream(stream)
    _C._set_current_stream(stream.stream_id, stream.device_index)


def _sleep(milliseconds) -> None:
    """Enqueue `milliseconds` of emulated device work on the current stream.

    Like torch.cuda._sleep: for tests and demos of asynchronous behaviour.
    """
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, numbers.Real):
        raise TypeError(
            f"_sleep expects a number of milliseconds, got {milliseconds!r} "
            f"of type {type(milliseconds).__name__}"
        )
    try:
        value = float(milliseconds)
    except OverflowError:  # an int beyond float range
        value = math.inf
    if not math.isfinite(value) or not 0 <= value <= _MAX_SLEEP_MS:
        raise ValueError(
            f"_sleep expects a finite, non-negative number of milliseconds, at most "
            f"{_MAX_SLEEP_MS:g}, got {milliseconds!r}"
        )
    _C._sleep(value)
