"""Test helpers for deterministic asynchronous tests (emulated runtime only)."""

from . import _C
from .streams import _check_spyre_stream, current_stream


class Gate:
    """Blocks every stream it is enqueued on until `release()`.

    Work launched on a stream after `block()` stays queued until the gate opens,
    so a test can observe "not finished yet" without guessing with sleeps.
    Used as a context manager, the gate is released on exit.
    """

    def __init__(self):
        self._gate = _C._Gate()

    def block(self, stream=None) -> None:
        """Enqueue the gate on `stream` (default: the current stream)."""
        stream = current_stream() if stream is None else stream
        _check_spyre_stream(stream)  # a cpu stream's id would gate a spyre stream
        self._gate.enqueue(stream.stream_id, stream.device_index)

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
    _C._inject_fault(stream.stream_id, stream.device_index, message)
