"""SpyreCCLWork: a spyreccl collective in flight, as c10d sees it (wait,
future, completion), and _AllOf, several gloo works waited on as one."""

import threading
from datetime import timedelta

import torch
from torch._C._distributed_c10d import Work

from .staging import _copy_pairs

# Work.wait's default: c10d's kNoTimeout (the process group's timeout applies).
_NO_TIMEOUT = timedelta(0)


def _error_message(error) -> str:
    """The message of a failed collective's future (a C++ runtime_error:
    waiters get RuntimeError)."""
    if isinstance(error, RuntimeError):
        return str(error)
    return f"{type(error).__name__}: {error}"


class SpyreCCLWork(Work):
    """A spyreccl collective in flight (docs/distributed.md, "Streams").

    The inputs were read in stream order at the call; the group's progress
    thread hands the host copies to gloo once they are there, and when gloo is
    done the results are copied back on the group's communication stream.
    `wait()` blocks the host until gloo has finished, then makes the caller's
    current stream wait for the copies back (no host wait for the device), as
    NCCL's `wait()` makes it wait for the collective. `get_future()` is a
    `torch.futures.Future` completed with the output tensors at the same point
    in stream order. A failure is raised by every `wait()` (the exception
    itself) and fails the future in C++ (waiting on it raises RuntimeError
    with the same message), and nothing is copied back (a pipelined all_reduce that gloo, or a rank's staging, fails
    partway through may have copied back the pieces reduced before).
    """

    def __init__(self, name, staging, outputs, comm_stream, called, timeout):
        super().__init__()
        self._name = name
        self._staging = staging
        # On the comm stream: gloo works in place inside it (`_in_place`), or,
        # staged, it only tells whether that stream failed before the collective.
        self._window = staging.window
        self._in_place = bool(staging.in_place)
        self._hold = staging.hold  # what synchronize() waits for (progress.py)
        self._outputs = outputs
        self._comm_stream = comm_stream  # None: no spyre tensor
        self._called = called  # recorded on the caller's stream after the staging copies
        self._timeout = timeout
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._error = None
        self._done_event = None  # recorded on the comm stream after the copies back
        self._future = None

    # Called by the completion thread: results of gloo (all of them, or one
    # piece of a pipelined all_reduce) go back on the comm stream.
    def _copy_back(self, pairs) -> None:
        with torch.spyre.stream(self._comm_stream):
            if self._called is not None:
                # Before the first copy back: WAW/WAR on the outputs.
                self._comm_stream.wait_event(self._called)
                self._called = None
            _copy_pairs(pairs)

    # Called once, by the progress thread (the collective could not start) or
    # the completion thread (gloo finished or failed).
    def _complete(self, error) -> None:
        try:
            error = self._copy_results(error)
        except BaseException as e:  # noqa: B036 (handed to every waiter)
            error = error or e
        finally:
            # Whatever happened, no stream stays parked on this collective.
            _close_windows(self._window, self._hold, self._comm_stream, self._name)
        with self._lock:
            self._error = error
            self._staging = None  # drop the host buffers (the copies keep theirs)
            self._called = None
            future = self._future
            self._finished.set()
        if future is not None:
            self._settle(future)

    def _copy_results(self, error):
        """Enqueue the copies back and the done event; returns the work's error."""
        if self._window is not None:
            self._window.close()  # gloo is done (or never started): comm goes on
        if error is None and self._comm_stream is None:
            _copy_pairs(self._staging.back)  # CPU twins only (PREMUL_SUM): plain copies
        elif error is None:
            try:
                self._copy_back(self._staging.back)
                self._done_event = torch.spyre.Event()
                self._done_event.record(self._comm_stream)
            except BaseException as e:  # noqa: B036 (handed to every waiter)
                error = e
        if error is not None and self._comm_stream is not None and self._done_event is None:
            # Failed: wait() still orders the caller after whatever the collective did
            # (nothing, or part of it when a peer died mid-way) before raising.
            try:
                self._done_event = torch.spyre.Event()
                self._done_event.record(self._comm_stream)
            except BaseException:  # noqa: B036 (the comm stream failed: nothing to order)
                self._done_event = None
        return error

    def _settle(self, future) -> None:
        if self._error is not None:
            # Failed in C++, as c10d's own backends fail theirs: Python's
            # Future.set_exception completes the future with the exception as
            # its value, which C++ (DDP's reducer) takes for the result.
            torch.spyre._C._future_set_error(future, _error_message(self._error))
        elif self._comm_stream is None:
            future.set_result(self._outputs)
        else:
            # A device future records its completion on the current stream:
            # the comm stream, after the copies back.
            with torch.spyre.stream(self._comm_stream):
                future.set_result(self._outputs)

    def wait(self, timeout: timedelta = _NO_TIMEOUT) -> bool:
        limit = timeout if timeout > _NO_TIMEOUT else self._timeout
        if not self._finished.wait(limit.total_seconds()):
            raise RuntimeError(
                f"spyreccl: {self._name} did not complete within {limit} "
                "(a rank did not join the collective, or its inputs never became ready)"
            )
        if self._done_event is not None:
            try:
                torch.spyre.current_stream().wait_event(self._done_event)
            except RuntimeError:
                if self._error is None:
                    raise
                # The caller's stream failed too: the collective's error is the one to raise.
        if self._error is not None:
            raise self._error
        return True

    def get_future(self) -> torch.futures.Future:
        with self._lock:
            if self._future is None:
                devices = [] if self._comm_stream is None else [self._comm_stream.device]
                self._future = torch.futures.Future(devices=devices)
                settle = self._finished.is_set()
            else:
                settle = False
            future = self._future
        if settle:
            self._settle(future)
        return future

    def is_completed(self) -> bool:
        return self._finished.is_set()

    def is_success(self) -> bool:
        return self._finished.is_set() and self._error is None

    def exception(self):
        return self._error

    def __repr__(self):
        state = (
            "pending" if not self._finished.is_set() else "failed" if self._error else "done"
        )
        return f"SpyreCCLWork({self._name}, {state})"


def _close_windows(window, hold, comm_stream, name) -> None:
    """Let the comm stream go on, and release the hold once the comm stream
    has run what is queued on it now (the copies back); at once without one.
    Never raises: it runs where the work completes, whatever happened."""
    if window is not None:
        window.close()
    if hold is None:
        return
    try:
        if comm_stream is None:
            hold.close()
        else:
            # A comm stream that cannot take the close (failed) closes it at once.
            hold.close_when_reached(comm_stream.stream_id, comm_stream.device_index,
                                    f"spyreccl:{name}:hold")
    except BaseException:  # noqa: B036 (never left shut)
        hold.close()


class _AllOf:
    """Several gloo works waited on as one (the coalesced collectives)."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout: timedelta = _NO_TIMEOUT) -> bool:
        for work in self._works:
            work.wait(timeout)
        return True
