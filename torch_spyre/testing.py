"""Test helpers for deterministic asynchronous tests (emulated runtime only).

They drive the emulated runtime's test facilities (torch_spyre._testing, built
from flex/testing.hpp), not torch_spyre._C: code under test keeps to the API a
card offers.
"""

from . import _testing
from .streams import _check_spyre_stream, current_stream

__all__ = ["Gate", "inject_fault", "trace_start", "trace_stop", "launched_ops", "completed_ops"]


class Gate:
    """Blocks every stream it is enqueued on until `release()`.

    Work launched on a stream after `block()` stays queued until the gate opens,
    so a test can observe "not finished yet" without guessing with sleeps.
    Used as a context manager, the gate is released on exit.
    """

    def __init__(self):
        self._gate = _testing.Gate()

    def block(self, stream=None) -> None:
        """Enqueue the gate on `stream` (default: the current stream)."""
        stream = current_stream() if stream is None else stream
        _check_spyre_stream(stream)  # a cpu stream's id would gate a spyre stream
        self._gate.enqueue(stream.native_handle)

    def release(self) -> None:
        self._gate.release()

    @property
    def blocked_streams(self) -> int:
        """How many streams have reached the gate and are waiting at it."""
        return self._gate.blocked_streams

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def inject_fault(stream, message: str) -> None:
    """Make the next operation the runtime executes on `stream` fail with `message`.

    The failure latches on the stream (see torch_spyre.errors): the next
    synchronize()/query() raises RuntimeError(message) once, and the stream
    stays in the error state.
    """
    _check_spyre_stream(stream)
    if not isinstance(message, str):
        raise TypeError(
            f"inject_fault expects a str message, got {message!r} of type {type(message).__name__}"
        )
    _testing.inject_fault(stream.native_handle, message)


def trace_start() -> None:
    """Record every device operation the runtime executes from now on."""
    _testing.trace_start()


def trace_stop(path: str) -> int:
    """Write the operations recorded since trace_start() to `path` as a Chrome
    trace (pid = card, tid = flex stream id); returns how many were written."""
    return _testing.trace_stop(path)


def launched_ops(stream=None) -> int:
    """Operations launched on `stream` (default: the current stream) so far."""
    stream = current_stream() if stream is None else stream
    _check_spyre_stream(stream)
    return _testing.launched_ops(stream.native_handle)


def completed_ops(stream=None) -> int:
    """Operations of `stream` (default: the current stream) that have finished."""
    stream = current_stream() if stream is None else stream
    _check_spyre_stream(stream)
    return _testing.completed_ops(stream.native_handle)
