"""The progress and completion threads of a group: collectives are handed to
gloo in call order, once their inputs are ready, and completed when gloo is
done, without blocking the callers (threading contract: the package's
docstring)."""

import atexit
import queue
import threading
import weakref

import torch
from torch._C._distributed_c10d import Work

from .. import _C
from .consistency import _unread, _window_dropped
from .pipeline import _Pieces
from .staging import _stream_failed
from .work import SpyreCCLWork, _close_windows

class _Progress:
    """Hands a group's collectives to gloo in call order, each once its inputs
    are on the host or its peer access window is open, without blocking the
    callers (one daemon thread per group).

    gloo matches collectives across ranks by the order they are issued, so
    while anything is queued here, collectives on CPU tensors queue behind it.
    """

    def __init__(self, timeout):
        self._timeout = timeout
        self._lock = threading.Lock()  # what it protects: the package docstring
        self._pending = 0  # collectives queued or being issued by the thread
        self._queue = queue.SimpleQueue()
        self._thread = None
        # Parked on each spyre collective's hold until its copies back have run
        # (_queue_windows); made with the first one, under the lock.
        self._hold_stream = None
        _LIVE_PROGRESS.add(self)

    def submit(self, name, staging, outputs, launch, comm_stream, direct=True) -> Work:
        """`launch()` issues the gloo collective; it runs here (CPU tensors,
        nothing queued, `direct`: it returns a gloo work) or on the thread."""
        called = caller = None
        if staging.staged and comm_stream is not None:
            caller = torch.spyre.current_stream()
            called = torch.spyre.Event()
            called.record(caller)  # after the staging copies
            # The stream sanitizer: the comm stream's work (gloo's accesses in place,
            # the copies back) is ordered after the caller's stream up to here.
            _C._sanitizer_collective(comm_stream.stream_id, caller.stream_id, name,
                                     [t for t, _ in staging.in_place],
                                     [w for _, w in staging.in_place])
        with self._lock:
            if direct and not staging.staged and self._pending == 0:
                return launch()  # CPU tensors used as they are: gloo's own work
            try:
                if staging.spyre and comm_stream is not None:
                    self._queue_windows(name, staging, comm_stream, called)
                work = SpyreCCLWork(name, staging, outputs, comm_stream, called, self._timeout)
            except BaseException:
                # Not queued: nothing may stay parked on its windows.
                _close_windows(staging.window, staging.hold, None, name)
                raise
            ready = called if staging.waits_for_caller else None
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_progress_loop, args=(self,), name="spyreccl-progress", daemon=True
                )
                self._thread.start()
            self._queue.put((ready, caller, launch, work))
        return work

    def _queue_windows(self, name, staging, comm_stream, called) -> None:
        """Queue a spyre collective's peer access window on the comm stream and
        its hold on the hold stream (under the lock: windows open in the order
        the progress thread issues them; one queued out of order would wait
        for a later one's gloo).

        Staged tensors get a window too: gloo never touches their device
        memory, but it opens only if the comm stream, which runs their copies
        back, did not fail before the collective; the progress thread closes
        it as soon as it is open. The hold is what synchronize() waits for:
        it is closed once the comm stream has run the collective's copies back
        (queued after gloo is done, after a synchronize() may have started)."""
        if staging.window is None:
            staging.window = _C._PeerAccessWindow()
        elif staging.in_place and not _stream_failed(comm_stream):
            # gloo works in place: after the caller's stream up to the call.
            comm_stream.wait_event(called)
        staging.window.enqueue(comm_stream.stream_id, comm_stream.device_index,
                               f"spyreccl:{name}")
        # DLFloat16 numerics: what gloo writes in place is rounded after the window.
        for tensor, write in staging.in_place:
            if write:
                _C._round_written_on(tensor, comm_stream.stream_id, comm_stream.device_index,
                                     f"spyreccl:{name}")
        if self._hold_stream is None:
            self._hold_stream = torch.spyre.Stream(device=comm_stream.device)
        staging.hold = _C._PeerAccessWindow()
        staging.hold.enqueue(self._hold_stream.stream_id, self._hold_stream.device_index,
                             f"spyreccl:{name}:hold")

    def stop(self, timeout: float = 10.0) -> None:
        """Let the threads finish what is queued and exit; join them, so none
        is still running (and dropping objects) when the interpreter exits."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None


# Groups never destroyed: their threads are stopped at exit, before the
# interpreter finalizes (a daemon thread waking up then would abort it).
_LIVE_PROGRESS = weakref.WeakSet()


@atexit.register
def _stop_all_progress() -> None:
    for progress in list(_LIVE_PROGRESS):
        progress.stop(timeout=1.0)


def _progress_loop(progress: _Progress) -> None:
    """Launcher: in call order, wait for each collective's staging copies
    (a host wait without the GIL), then issue it on gloo."""
    _C._sanitizer_internal_thread()  # its waits order nothing for the program
    finished = queue.SimpleQueue()
    completer = threading.Thread(
        target=_completion_loop, args=(finished,), name="spyreccl-completion", daemon=True
    )
    completer.start()
    in_hand = []  # the collective taken from the queue and not yet handed on
    try:
        _launch_in_order(progress, finished, completer, in_hand)
    except BaseException as e:  # noqa: B036 (the thread dies: nothing may stay parked)
        # The collective in hand and every one still queued fail, and their
        # windows close (a stream parked on one would hang every later
        # synchronize()); the completion thread finishes those handed to it.
        _fail(in_hand + _drain(progress._queue), "the progress thread stopped", e)
        finished.put(None)
        raise


def _drain(pending) -> list:
    works = []
    while True:
        try:
            item = pending.get_nowait()
        except queue.Empty:
            return works
        if item is not None:
            works.append(item[-1])


def _fail(works, what, cause) -> None:
    for work in works:
        if not work.is_completed():
            work._complete(RuntimeError(
                f"spyreccl: {work._name}: {what} before completing it "
                f"({type(cause).__name__}: {cause})"))


def _launch_in_order(progress, finished, completer, in_hand) -> None:
    while True:
        item = progress._queue.get()
        if item is None:
            finished.put(None)
            completer.join()
            return
        ready, caller, launch, work = item
        in_hand[:] = [work]
        item = None
        error = inner = why = None
        try:
            if ready is not None:
                ready.synchronize()
                if _stream_failed(caller):
                    # The stream failed before the staging copies ran: they
                    # were discarded (its next synchronize() raises why).
                    why = _unread(caller)
                    error = RuntimeError(f"spyreccl: {work._name}: {why}")
            window = work._window
            if error is None and window is not None:
                if not window.wait_open():
                    # The comm stream failed before the collective: gloo would work on
                    # the device memory in place, or the copies back would be dropped.
                    why = _window_dropped(work._comm_stream, window.why())
                    error = RuntimeError(f"spyreccl: {work._name}: {why}")
                elif not work._in_place:
                    window.close()  # staged only: gloo never touches device memory
        except BaseException as e:  # noqa: B036 (handed to the waiters)
            error = e
        window = None
        # Not under the lock: the exchange (and a pipelined all_reduce's
        # staging waits) wait for peers, and callers need the lock to queue.
        # This collective still counts in `_pending` meanwhile, so a caller
        # queues behind it rather than issuing on gloo ahead of it.
        try:
            if error is None:
                inner = launch()
            elif getattr(launch, "reports_failure", False):
                launch(failure=why or str(error))  # raises on every rank, this one too
        except BaseException as e:  # noqa: B036
            error = e
        with progress._lock:
            progress._pending -= 1
        # Dropped before the hand-over: once the work completes, nothing of this
        # thread still holds its host buffers (a waiter's next call reuses them).
        item = (inner, error, work)
        ready = caller = launch = work = inner = None
        finished.put(item)
        in_hand.clear()
        item = None


def _completion_loop(finished) -> None:
    """Completer: wait for gloo (not every gloo work has a future), in order,
    then copy the results back. Separate from the launcher so the next
    collective's staging wait overlaps this one's transfer."""
    _C._sanitizer_internal_thread()
    in_hand = []
    try:
        _complete_in_order(finished, in_hand)
    except BaseException as e:  # noqa: B036 (the thread dies: nothing may stay parked)
        _fail(in_hand + _drain(finished), "the completion thread stopped", e)
        raise


def _complete_in_order(finished, in_hand) -> None:
    while True:
        item = finished.get()
        if item is None:
            return
        inner, error, work = item
        in_hand[:] = [work]
        item = None
        if error is None:
            try:
                _await_gloo(inner, work)
            except BaseException as e:  # noqa: B036
                error = e
        inner = None  # gloo's buffers: no longer held here once the waiters wake
        work._complete(error)
        in_hand.clear()
        work = error = None


def _await_gloo(inner, work) -> None:
    """Wait for a collective's gloo work; the pieces of a pipelined all_reduce
    are copied back one by one, as each is reduced."""
    if not isinstance(inner, _Pieces):
        inner.wait()
        return
    error = None
    last = len(inner.works) - 1
    for k, (piece, pairs) in enumerate(inner.works):
        piece.wait()  # every piece, even after a failure: then nothing of it runs on
        if k == last and error is None:
            error = inner.partly_read()
        if error is None:
            work._copy_back(pairs)
    if error is not None:
        raise error
