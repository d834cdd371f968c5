"""spyreccl: the c10d backend of the spyre device (docs/distributed.md).

Spyre has no collective engine of its own here, so a gloo process group that
spyreccl owns (same store, rank and size) moves the bytes, following the
caller's streams as NCCL does:

- at the call, an event is recorded on the caller's current stream (the host
  does not wait);
- the group's progress thread, in call order, waits for that event and issues
  the collective on gloo (after comparing it across ranks);
- when gloo is done, an event is recorded on the group's communication
  stream; `wait()` makes the caller's current stream wait for it and
  `get_future()` completes a device future at the same point.

gloo works on the device memory itself ("direct": the emulated device's
memory is host memory, as its compute kernels use it) where it can: a
contiguous tensor without conj/neg bits, not needing a private copy. Other
spyre tensors, and every one under SPYRECCL_STAGING=1 (the path of a device
whose memory the host cannot address), are staged: copied to pinned host
memory on the caller's stream before the event, and the results copied back
on the communication stream.

CPU tensors go straight to gloo, so one process group serves both devices.
`torch_spyre/__init__.py` registers the backend; this module loads lazily, at
the first process group that uses it.
"""

import atexit
import os
import queue
import threading
import weakref
from datetime import timedelta

import torch
from torch._C._distributed_c10d import ProcessGroup, ProcessGroupGloo, ReduceOp, Work

__all__ = ["ProcessGroupSpyreCCL", "SpyreCCLWork", "create_backend"]

BACKEND_NAME = "spyreccl"

# Work.wait's default: c10d's kNoTimeout (the process group's timeout applies).
_NO_TIMEOUT = timedelta(0)


def create_backend(common_opts, backend_opts=None) -> "ProcessGroupSpyreCCL":
    """The creator c10d calls (extended API: c10d::DistributedBackendOptions)."""
    return ProcessGroupSpyreCCL(
        common_opts.store,
        common_opts.group_rank,
        common_opts.group_size,
        common_opts.timeout,
        group_name=common_opts.group_id,
        global_ranks_in_group=list(common_opts.global_ranks_in_group),
    )


def _is_spyre(tensor) -> bool:
    return tensor.device.type == "spyre"


def _any_spyre(args) -> bool:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            if _is_spyre(arg):
                return True
        elif isinstance(arg, (list, tuple)) and _any_spyre(arg):
            return True
    return False


def _describe(tensor) -> str:
    return f"{tensor.dtype} {list(tensor.shape)}"


def _overlapping(tensor):
    """Why the collective cannot write `tensor` (None: it can). Strides do not
    matter otherwise: every spyre tensor is staged through a contiguous host
    twin and copied back element by element (docs/distributed.md, "Strided
    tensors"), but a copy cannot write a tensor whose elements share memory."""
    if torch._debug_has_internal_overlap(tensor) != 1:  # 1: MemOverlap::Yes
        return None
    return (
        f"the result cannot be written into a tensor whose elements overlap in memory "
        f"(shape {list(tensor.shape)}, strides {list(tensor.stride())}): pass one whose "
        "elements are distinct (e.g. .clone() it)"
    )


def _check_reduce_op(op, tensors) -> None:
    """Refuse at the call what gloo would refuse later with a vaguer message."""
    name = op.op.name
    for t in tensors:
        if name == "AVG" and not (t.is_floating_point() or t.is_complex()):
            raise ValueError(
                f"spyreccl: ReduceOp.AVG needs a floating point tensor, got {t.dtype}; "
                "use ReduceOp.SUM and divide"
            )
        if name in ("BAND", "BOR", "BXOR") and (t.is_floating_point() or t.is_complex()):
            raise ValueError(
                f"spyreccl: ReduceOp.{name} needs an integer or bool tensor, got {t.dtype}"
            )


# An all_reduce of a tensor this large is staged, reduced and copied back in
# pieces of this size, so the copies to and from the host overlap gloo's
# transfer of the other pieces (and the copy back after the last piece is short).
_PIPELINE_BYTES = 16 * 2**20
_PIECE_BYTES = 16 * 2**20


def _piece_slices(numel, itemsize):
    """The pieces of a pipelined all_reduce (the last one may be shorter)."""
    step = max(_PIECE_BYTES // itemsize, 1)
    return [slice(start, min(start + step, numel)) for start in range(0, numel, step)]


def _stage(host, tensor):
    """Copy (part of) a pipelined all_reduce's input to the host on the current
    stream (the caller's); returns the event that marks it staged."""
    host.copy_(tensor, non_blocking=True)
    staged = torch.spyre.Event()
    staged.record()
    return staged


def _staging_forced() -> bool:
    value = os.environ.get("SPYRECCL_STAGING", "0")
    if value not in ("0", "1"):
        raise ValueError(f"SPYRECCL_STAGING must be 0 or 1, got {value!r}")
    return value == "1"


# The descriptions ranks compare before each staged collective (bytes, padded).
_SIGNATURE_BYTES = 256


SUPPORTED = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all_single",
    "all_gather_single_coalesced",
    "reduce_scatter_single_coalesced",
    "barrier",
)


def _cpu_only(name, gloo_name):
    """A collective spyreccl runs for CPU tensors only, straight on gloo."""

    def method(self, *args):
        if _any_spyre(args):
            raise NotImplementedError(
                f"spyreccl: {name} is not supported on spyre tensors (supported: "
                f"{', '.join(SUPPORTED)}); copy the tensors to the cpu first"
            )
        # Not ProcessGroup.<name>: c10d's Python trampoline would call us again.
        return self._cpu(name, lambda: getattr(self._gloo, gloo_name)(*args))

    method.__name__ = name
    return method


def _direct(tensor) -> bool:
    """gloo may work on the tensor's device memory in place (a host view of
    it): it must be dense and contiguous, as gloo's own tensors are."""
    return tensor.is_contiguous() and not (tensor.is_conj() or tensor.is_neg())


def _host_view(tensor):
    """A CPU tensor over a spyre tensor's memory; it keeps the memory alive."""
    return torch.spyre._C._host_view(tensor)


class _Staging:
    """What gloo uses in place of one collective's tensors (host views of
    device memory, or host twins), and the copies back."""

    def __init__(self, direct=True):
        self.direct = direct  # host views allowed (SPYRECCL_STAGING unset)
        self.staged = False  # any view or twin: the work is a SpyreCCLWork
        self.spyre = False  # any spyre tensor
        # The collective must wait for the caller's stream: a staging copy was
        # enqueued, or gloo reads or writes device memory directly.
        self.waits_for_caller = False
        self.back = []  # (tensor, host twin) pairs copied back at completion
        self.written = []  # spyre tensors the copies back write (on the comm stream)
        self.problem = None  # why this rank cannot take part (refused on every rank)

    def __call__(self, tensor, *, read=True, write=True, private=False, scratch=False):
        """The tensor gloo should use in place of `tensor`.

        read: the collective reads it (copy the data over, in stream order).
        write: the collective writes it (copy the result back at completion).
        private: use a twin even for a CPU tensor (its data must stay intact).
        scratch: gloo overwrites it though no result is wanted (a spyre
        tensor gets a twin, never a view).
        """
        if not (_is_spyre(tensor) or private):
            return tensor
        if write and _is_spyre(tensor) and self.problem is None:
            self.problem = _overlapping(tensor)
        self.staged = True
        self.spyre = self.spyre or _is_spyre(tensor)
        if self.direct and _is_spyre(tensor) and not (private or scratch) and _direct(tensor):
            # After the caller's stream has run up to the call (WAR and WAW
            # as much as RAW: gloo writes in place).
            self.waits_for_caller = True
            if write:
                self.written.append(tensor)
            return _host_view(tensor)
        # Contiguous whatever the tensor's strides (the copies convert), pinned
        # (so the copies are only enqueued) and allocated per call: gloo
        # writes into it from its own threads.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=_is_spyre(tensor))
        if read:
            # On the caller's current stream: it reads what was enqueued before.
            host.copy_(tensor, non_blocking=True)
            self.waits_for_caller = self.waits_for_caller or _is_spyre(tensor)
        if write:
            self.back.append((tensor, host))
            if _is_spyre(tensor):
                self.written.append(tensor)
        return host


def _copy_pairs(pairs) -> None:
    """Copy gloo's results into the outputs on the current stream. Pinned
    sources: each copy is only enqueued and keeps its host buffer alive until
    it has run."""
    for tensor, host in pairs:
        tensor.copy_(host, non_blocking=True)


def _stream_failed(stream) -> bool:
    """The stream failed: the work queued on it (staging copies) was dropped."""
    return torch.spyre.stream_get_error(stream) != torch.spyre.SpyreStreamError.Success


class SpyreCCLWork(Work):
    """A spyreccl collective in flight (docs/distributed.md, "Streams").

    The inputs were read in stream order at the call; the group's progress
    thread hands the host copies to gloo once they are there, and when gloo is
    done the results are copied back on the group's communication stream.
    `wait()` blocks the host until gloo has finished, then makes the caller's
    current stream wait for the copies back (no host wait for the device), as
    NCCL's `wait()` makes it wait for the collective. `get_future()` is a
    `torch.futures.Future` completed with the output tensors at the same point
    in stream order. A failure is raised by every `wait()` and nothing is
    copied back (a pipelined all_reduce that gloo, or a rank's staging, fails
    partway through may have copied back the pieces reduced before).
    """

    def __init__(self, name, staging, outputs, comm_stream, called, timeout):
        super().__init__()
        self._name = name
        self._staging = staging
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
        if error is None and self._comm_stream is None:
            _copy_pairs(self._staging.back)  # CPU twins only (PREMUL_SUM): plain copies
        elif error is None:
            try:
                self._copy_back(self._staging.back)
                self._done_event = torch.spyre.Event()
                self._done_event.record(self._comm_stream)
            except BaseException as e:  # noqa: B036 (handed to every waiter)
                error = e
        with self._lock:
            self._error = error
            self._staging = None  # drop the host buffers (the copies keep theirs)
            self._called = None
            future = self._future
            self._finished.set()
        if future is not None:
            self._settle(future)

    def _settle(self, future) -> None:
        if self._error is not None:
            future.set_exception(self._error)
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
        if self._error is not None:
            raise self._error
        if self._done_event is not None:
            torch.spyre.current_stream().wait_event(self._done_event)
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


class _Exchange:
    """An all-gather of every rank's short description of a collective (or
    "!" and why it cannot take part), in flight on gloo."""

    def __init__(self, gloo, described):
        raw = described.encode()[:_SIGNATURE_BYTES]
        mine = torch.zeros(_SIGNATURE_BYTES, dtype=torch.uint8)
        if raw:
            mine[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        self._every = torch.empty(gloo.size() * _SIGNATURE_BYTES, dtype=torch.uint8)
        self._work = gloo._allgather_base(self._every, mine)

    def rows(self) -> list:
        """Every rank's description, by rank (waits for gloo)."""
        self._work.wait()
        return [
            bytes(row.tolist()).rstrip(b"\0").decode(errors="replace")
            for row in self._every.view(-1, _SIGNATURE_BYTES)
        ]


def _failed_ranks(rows) -> str:
    """The ranks whose row says they could not take part, and why ("" if none)."""
    return "; ".join(f"rank {r}: {row[1:]}" for r, row in enumerate(rows) if row.startswith("!"))


def _refuse_mismatch(name, rows) -> None:
    """Raise, on every rank alike, if a rank could not take part or the
    ranks' descriptions differ."""
    failed = _failed_ranks(rows)
    if failed:
        raise RuntimeError(f"spyreccl: {name} failed before moving any data ({failed})")
    if any(row != rows[0] for row in rows):
        ranks = "; ".join(f"rank {r}: {row}" for r, row in enumerate(rows))
        raise RuntimeError(
            f"spyreccl: {name} does not match across ranks ({ranks}): every rank "
            "must call the same collective with the same dtypes and shapes"
        )


def _unread(stream) -> str:
    """Why a rank cannot take part: its stream failed, the staging copies were dropped."""
    return f"its inputs were never read: stream {stream.stream_id} failed before the collective"


def _partly_read(stream) -> str:
    """A pipelined all_reduce whose stream failed after its first piece was staged."""
    return (
        f"its inputs were only partly read: stream {stream.stream_id} failed during the "
        "collective"
    )


class _Pieces:
    """The gloo works of a pipelined all_reduce, each with the piece of the
    output it produces: the completion thread copies a piece back as soon as
    its work is done, while gloo still reduces the next ones."""

    def __init__(self, name):
        self.name = name
        # _Exchange: did every rank read all its pieces? (None: unchecked, or
        # a single piece)
        self.fully_read = None
        self.error = None  # this rank's staging failed partway (unchecked)
        self.works = []  # (gloo work, [(output, host)] to copy back once it is done)

    def add(self, work, pairs) -> None:
        self.works.append((work, pairs))

    def partly_read(self):
        """The error if a rank's stream failed after its first piece was read:
        the pieces reduced before were copied back, the last one is not."""
        if self.fully_read is not None:
            failed = _failed_ranks(self.fully_read.rows())
            if failed:
                return RuntimeError(
                    f"spyreccl: {self.name} failed partway ({failed}): the pieces reduced "
                    "before were copied back and the last one was not, so the tensor's "
                    "contents are undefined on every rank"
                )
        return self.error


class _AllOf:
    """Several gloo works waited on as one (the coalesced collectives)."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout: timedelta = _NO_TIMEOUT) -> bool:
        for work in self._works:
            work.wait(timeout)
        return True


class _Progress:
    """Hands a group's collectives to gloo in call order, each once its inputs
    are on the host, without blocking the callers (one daemon thread per group).

    gloo matches collectives across ranks by the order they are issued, so
    while anything is queued here, collectives on CPU tensors queue behind it.
    """

    def __init__(self, timeout):
        self._timeout = timeout
        self._lock = threading.Lock()  # order of launches; `_pending`
        self._pending = 0
        self._queue = queue.SimpleQueue()
        self._thread = None
        _LIVE_PROGRESS.add(self)

    def submit(self, name, staging, outputs, launch, comm_stream, direct=True) -> Work:
        """`launch()` issues the gloo collective; it runs here (CPU tensors,
        nothing queued, `direct`: it returns a gloo work) or on the thread."""
        called = caller = None
        if staging.staged and comm_stream is not None:
            caller = torch.spyre.current_stream()
            called = torch.spyre.Event()
            called.record(caller)  # after the staging copies
        with self._lock:
            if direct and not staging.staged and self._pending == 0:
                return launch()  # CPU tensors used as they are: gloo's own work
            work = SpyreCCLWork(name, staging, outputs, comm_stream, called, self._timeout)
            ready = called if staging.waits_for_caller else None
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_progress_loop, args=(self,), name="spyreccl-progress", daemon=True
                )
                self._thread.start()
            self._queue.put((ready, caller, launch, work))
        return work

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
    finished = queue.SimpleQueue()
    completer = threading.Thread(
        target=_completion_loop, args=(finished,), name="spyreccl-completion", daemon=True
    )
    completer.start()
    while True:
        item = progress._queue.get()
        if item is None:
            finished.put(None)
            completer.join()
            return
        ready, caller, launch, work = item
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
        except BaseException as e:  # noqa: B036 (handed to the waiters)
            error = e
        with progress._lock:
            progress._pending -= 1
            try:
                if error is None:
                    inner = launch()
                elif getattr(launch, "reports_failure", False):
                    launch(failure=why or str(error))  # raises on every rank, this one too
            except BaseException as e:  # noqa: B036
                error = e
        finished.put((inner, error, work))
        ready = caller = launch = work = inner = None  # drop them now, not at the next item


def _completion_loop(finished) -> None:
    """Completer: wait for gloo (not every gloo work has a future), in order,
    then copy the results back. Separate from the launcher so the next
    collective's staging wait overlaps this one's transfer."""
    while True:
        item = finished.get()
        if item is None:
            return
        inner, error, work = item
        item = None
        if error is None:
            try:
                _await_gloo(inner, work)
            except BaseException as e:  # noqa: B036
                error = e
        work._complete(error)
        inner = work = error = None


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


class ProcessGroupSpyreCCL(ProcessGroup):
    """Collectives on spyre tensors, run by gloo on their memory or on host copies.

    c10d uses a Python process group as the group's only backend, so this
    group also serves CPU tensors (directly with its gloo group); its gloo
    group is also registered for "cpu" so collectives not listed below still
    work on CPU tensors.
    """

    def __init__(self, store, rank, size, timeout, group_name="", global_ranks_in_group=()):
        super().__init__(rank, size)
        self._gloo = ProcessGroupGloo(store, rank, size, timeout)
        self._gloo.options.global_ranks_in_group = list(global_ranks_in_group)
        if group_name:
            self._gloo.options.group_name = group_name
        self._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, self._gloo)
        self._set_default_backend(ProcessGroup.BackendType.GLOO)
        self._progress = _Progress(timeout)
        self._comm_stream = None
        self._comm_stream_lock = threading.Lock()
        # SPYRECCL_CHECK=0 skips the cross-rank comparison of each collective
        # (one small gloo all-gather per staged collective).
        self._check = os.environ.get("SPYRECCL_CHECK", "1") != "0"
        # SPYRECCL_STAGING=1 stages every spyre tensor through host memory
        # (no direct host views of device memory).
        self._direct = not _staging_forced()

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def __repr__(self):
        return f"ProcessGroupSpyreCCL(rank={self.rank()}, size={self.size()})"

    # init_process_group(device_id=spyre:N) asks the group for the backend
    # of the device to connect it eagerly; spyreccl connects at construction.
    supports_splitting = False

    def _get_backend(self, device):
        if torch.device(device).type == "spyre":
            return self
        return super()._get_backend(device)

    # ---------------------------------------------------------- helpers

    def _run(self, name, staging, outputs, launch, direct=True, signature=None) -> Work:
        """`signature`: what must be the same on every rank (dtype, shapes, op);
        spyre collectives compare it across ranks before moving any data."""
        comm = None
        if staging.spyre:
            if staging.problem is not None and not (signature is not None and self._check):
                # No comparison to tell the other ranks: refuse here.
                raise ValueError(f"spyreccl: {name}: {staging.problem}")
            comm = self._comm()
            for tensor in staging.written:
                tensor.record_stream(comm)  # written on comm: not reused before
            if signature is not None and self._check:
                described, collective = f"{name}({signature})", launch
                if staging.problem is not None:
                    described = "!" + staging.problem  # refused on every rank

                def launch(failure=None):
                    # failure: this rank cannot take part (its inputs were
                    # lost); the comparison then fails on every rank.
                    self._check_signature(name, described if failure is None else "!" + failure)
                    return collective()

                launch.reports_failure = True

        return self._progress.submit(name, staging, outputs, launch, comm, direct)

    def _comm(self):
        """The group's communication stream (NCCL's ncclStream): the copies
        back run on it, and wait() makes callers wait for it."""
        with self._comm_stream_lock:
            if self._comm_stream is None:
                self._comm_stream = torch.spyre.Stream()
            return self._comm_stream

    def _check_signature(self, name, described) -> None:
        """Compare the collective across ranks (gloo, on the progress thread,
        in order) and refuse a mismatch on every rank: gloo itself would abort
        the process on a size mismatch."""
        _refuse_mismatch(name, _Exchange(self._gloo, described).rows())

    def _cpu(self, name, launch) -> Work:
        """A collective on CPU tensors only, in order with the queued ones."""
        return self._progress.submit(name, self._staging(), [], launch, None)

    def _staging(self) -> _Staging:
        return _Staging(direct=self._direct)

    @staticmethod
    def _premul(opts, hosts):
        """PREMUL_SUM (not in gloo): SUM over private copies scaled by the factor.

        Returns what to run once the copies are on the host (before gloo)."""
        op = opts.reduceOp
        if op != ReduceOp.PREMUL_SUM:
            return lambda: None
        factor = op.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.to("cpu")
        opts.reduceOp = ReduceOp.SUM

        def scale():
            for host in hosts:
                host.mul_(factor)

        return scale

    # ---------------------------------------------------------- collectives

    def allreduce(self, tensors, opts):
        # Whether it goes in pieces must follow only from what every rank
        # compares (count, dtype, shape, op): the pieces are other gloo
        # operations, so a rank deciding otherwise (say, on its tensor's
        # strides) would leave the ranks' gloo operations out of step.
        if (
            len(tensors) == 1
            and _is_spyre(tensors[0])
            and tensors[0].nbytes >= _PIPELINE_BYTES
            and opts.reduceOp != ReduceOp.PREMUL_SUM
        ):
            return self._allreduce_pipelined(tensors[0], opts)
        staging = self._staging()
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        _check_reduce_op(opts.reduceOp, tensors)
        signature = f"{opts.reduceOp.op.name}, " + ", ".join(map(_describe, tensors))
        hosts = [staging(t, private=private) for t in tensors]
        scale = self._premul(opts, hosts)

        def launch():
            scale()
            return self._gloo.allreduce(hosts, opts)

        return self._run("allreduce", staging, tensors, launch, signature=signature)

    def _allreduce_pipelined(self, tensor, opts):
        """A large all_reduce in pieces, each with its own event: gloo reduces
        piece k while piece k+1 is still being copied to the host, and piece k
        is copied back while gloo reduces the next ones. gloo reduces in place
        in the pinned buffer.

        A strided tensor goes to gloo in the same pieces (every rank must issue
        the same gloo operations), but it is staged and copied back whole:
        a piece of the host buffer is not a view of a strided tensor. A direct
        one goes in the same pieces too, of a host view of its memory, each
        ready once the caller's stream has run up to the call."""
        _check_reduce_op(opts.reduceOp, [tensor])
        problem = _overlapping(tensor)
        if problem is not None and not self._check:
            raise ValueError(f"spyreccl: allreduce: {problem}")
        described = f"allreduce({opts.reduceOp.op.name}, {_describe(tensor)})"
        if problem is not None:
            described = "!" + problem  # refused on every rank
        caller = torch.spyre.current_stream()
        slices = _piece_slices(tensor.numel(), tensor.element_size())
        direct = self._direct and _direct(tensor)
        if direct:
            view = _host_view(tensor).view(-1)
            called = torch.spyre.Event()
            called.record()
            pieces = [(view[i], called, []) for i in slices]
        elif tensor.is_contiguous():
            host = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
            flat = tensor.view(-1)
            # (host piece gloo reduces, its staging copy done, [(output, host)] copied back)
            pieces = [(host[i], _stage(host[i], flat[i]), [(flat[i], host[i])]) for i in slices]
        else:
            host = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
            staged = _stage(host.view(tensor.shape), tensor)
            pieces = [(host[i], staged, []) for i in slices]
            pieces[-1][2].append((tensor, host.view(tensor.shape)))
        staging = self._staging()
        staging.staged = staging.spyre = True  # `waits_for_caller` stays False: launch waits per piece
        staging.written = [tensor]  # `back` stays empty: the pieces go back one by one

        def launch():
            return self._reduce_pieces(described, caller, pieces, opts, direct)

        return self._run("allreduce", staging, [tensor], launch)

    def _reduce_pieces(self, described, caller, pieces, opts, direct) -> _Pieces:
        """The progress thread's part of a pipelined all_reduce: compare it
        across ranks, then hand each piece to gloo once it is on the host.

        The comparison is issued before waiting for the first piece, so it
        overlaps the staging. Whether every rank's inputs were read is then
        exchanged twice (only once the ranks agree on the collective, so every
        rank issues the same gloo operations): once the first piece is on the
        host, waited for before any piece is issued (a direct rank's gloo
        writes the tensor itself, so nothing may start if a rank's stream had
        already failed and it read nothing), and once the last one is (issued
        ahead of the last piece, not waited for here but before its copy back:
        a staged stream that failed in between read only part; a direct
        rank's pieces are all ready at once)."""
        signature = _Exchange(self._gloo, described) if self._check else None
        pieces[0][1].synchronize()
        unread = _unread(caller) if _stream_failed(caller) else None
        reductions = _Pieces("allreduce")
        if signature is not None:
            _refuse_mismatch("allreduce", signature.rows())  # before any data
            read = _Exchange(self._gloo, "" if unread is None else "!" + unread)
            _refuse_mismatch("allreduce", read.rows())  # every rank alike
        elif unread is not None:
            raise RuntimeError(f"spyreccl: allreduce: {unread}")
        last = len(pieces) - 1
        for k, (twin, staged, back) in enumerate(pieces):
            staged.synchronize()
            if k == last and k > 0:
                # A failure since the first piece latched on the stream.
                partly = None
                if not direct and unread is None and _stream_failed(caller):
                    partly = _partly_read(caller)
                if signature is not None:
                    reductions.fully_read = _Exchange(
                        self._gloo, "" if partly is None else "!" + partly)
                elif partly is not None:
                    reductions.error = RuntimeError(f"spyreccl: allreduce: {partly}")
            # Issued even if a rank failed: every rank issues every piece.
            reductions.add(self._gloo.allreduce([twin], opts), back)
        return reductions

    def broadcast(self, tensors, opts):
        staging = self._staging()
        root = self.rank() == opts.rootRank
        # The root only sends, the others only receive.
        hosts = [staging(t, read=root, write=not root) for t in tensors]
        return self._run(
            "broadcast",
            staging,
            tensors,
            lambda: self._gloo.broadcast(hosts, opts),
            signature=f"root {opts.rootRank}, " + ", ".join(map(_describe, tensors)),
        )

    def reduce(self, tensors, opts):
        staging = self._staging()
        root = self.rank() == opts.rootRank
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        # Only the root receives the result; the others' tensors stay as they were.
        _check_reduce_op(opts.reduceOp, tensors)
        signature = f"{opts.reduceOp.op.name}, root {opts.rootRank}, " + ", ".join(
            map(_describe, tensors)
        )
        # gloo uses the others' tensors as scratch space.
        hosts = [staging(t, write=root, private=private, scratch=not root) for t in tensors]
        scale = self._premul(opts, hosts)

        def launch():
            scale()
            return self._gloo.reduce(hosts, opts)

        return self._run("reduce", staging, tensors, launch, signature=signature)

    def allgather(self, output_tensors, input_tensors, opts):
        staging = self._staging()
        outputs = [[staging(t, read=False) for t in ts] for ts in output_tensors]
        inputs = [staging(t, write=False) for t in input_tensors]
        return self._run(
            "allgather",
            staging,
            output_tensors,
            lambda: self._gloo.allgather(outputs, inputs, opts),
            signature=", ".join(map(_describe, input_tensors)),
        )

    def _allgather_base(self, output, input, opts):
        staging = self._staging()
        host_out = staging(output, read=False)
        host_in = staging(input, write=False)
        return self._run(
            "all_gather_single",
            staging,
            [output],
            lambda: self._gloo._allgather_base(host_out, host_in, opts),
            signature=_describe(input),
        )

    all_gather_single = _allgather_base

    def _reduce_scatter_base(self, output, input, opts):
        staging = self._staging()
        host_out = staging(output, read=False)
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        _check_reduce_op(opts.reduceOp, [input])
        signature = f"{opts.reduceOp.op.name}, {_describe(input)}"
        host_in = staging(input, write=False, private=private)
        scale = self._premul(opts, [host_in])

        def launch():
            scale()
            return self._gloo._reduce_scatter_base(host_out, host_in, opts)

        return self._run("reduce_scatter_single", staging, [output], launch, signature=signature)

    reduce_scatter_single = _reduce_scatter_base

    # The coalesced forms (functional collectives: DTensor, FSDP): one work
    # for every pair, each pair run as its single-tensor collective on gloo.
    def all_gather_single_coalesced(self, outputs, inputs, opts):
        staging = self._staging()
        pairs = [(staging(o, read=False), staging(i, write=False)) for o, i in zip(outputs, inputs)]
        return self._run(
            "all_gather_single_coalesced",
            staging,
            outputs,
            lambda: _AllOf([self._gloo._allgather_base(o, i, opts) for o, i in pairs]),
            direct=False,
            signature=", ".join(map(_describe, inputs)),
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        staging = self._staging()
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        _check_reduce_op(opts.reduceOp, inputs)
        signature = f"{opts.reduceOp.op.name}, " + ", ".join(map(_describe, inputs))
        pairs = [
            (staging(o, read=False), staging(i, write=False, private=private))
            for o, i in zip(outputs, inputs)
        ]
        scale = self._premul(opts, [i for _, i in pairs])

        def launch():
            scale()
            return _AllOf([self._gloo._reduce_scatter_base(o, i, opts) for o, i in pairs])

        return self._run(
            "reduce_scatter_single_coalesced",
            staging,
            outputs,
            launch,
            direct=False,
            signature=signature,
        )

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts):
        staging = self._staging()
        host_out = staging(output, read=False)
        host_in = staging(input, write=False)
        return self._run(
            "all_to_all_single",
            staging,
            [output],
            lambda: self._gloo.alltoall_base(
                host_out, host_in, output_split_sizes, input_split_sizes, opts
            ),
            signature=str(input.dtype),  # split sizes may differ by rank
        )

    alltoall_base = all_to_all_single

    def gather(self, output_tensors, input_tensors, opts):
        staging = self._staging()
        # Only the root receives (output_tensors is empty elsewhere).
        outputs = [[staging(t, read=False) for t in ts] for ts in output_tensors]
        inputs = [staging(t, write=False) for t in input_tensors]
        return self._run(
            "gather",
            staging,
            output_tensors,
            lambda: self._gloo.gather(outputs, inputs, opts),
            signature=f"root {opts.rootRank}, " + ", ".join(map(_describe, input_tensors)),
        )

    def scatter(self, output_tensors, input_tensors, opts):
        staging = self._staging()
        outputs = [staging(t, read=False) for t in output_tensors]
        # Only the root sends (input_tensors is empty elsewhere).
        inputs = [[staging(t, write=False) for t in ts] for ts in input_tensors]
        return self._run(
            "scatter",
            staging,
            output_tensors,
            lambda: self._gloo.scatter(outputs, inputs, opts),
            signature=f"root {opts.rootRank}, " + ", ".join(map(_describe, output_tensors)),
        )

    def barrier(self, opts):
        # A host barrier: it does not wait for device work (synchronize first).
        return self._cpu("barrier", lambda: self._gloo.barrier(opts))

    def shutdown(self) -> None:
        """destroy_process_group: finish what is queued, then let the copies
        back still on the comm stream complete before gloo goes away."""
        self._progress.stop()
        if self._comm_stream is not None:
            self._comm_stream.synchronize()
        self._gloo.shutdown()

    # The other collectives and point-to-point ops of torch.distributed.
    reduce_scatter = _cpu_only("reduce_scatter", "reduce_scatter")
    alltoall = _cpu_only("alltoall", "alltoall")
    send = _cpu_only("send", "send")
    recv = _cpu_only("recv", "recv")
    recv_anysource = _cpu_only("recv_anysource", "recv_anysource")
    allreduce_coalesced = _cpu_only("allreduce_coalesced", "allreduce_coalesced")
    allgather_coalesced = _cpu_only("allgather_coalesced", "allgather_coalesced")
