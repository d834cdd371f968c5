"""spyreccl: the c10d backend of the spyre device (docs/distributed.md).

Spyre has no collective engine of its own here, so spyreccl stages spyre
tensors through pinned host memory and lets a gloo process group it owns (same
store, rank and size) run the collective:

- at the call, spyre inputs are copied to the host on the caller's current
  stream, and the host waits for those copies (the staging cost);
- gloo runs the collective on the host copies;
- `wait()` waits for gloo, then copies the results back into the spyre tensors
  on the caller's current stream at that moment, in stream order (no host wait).

CPU tensors go straight to gloo, so one process group serves both devices.
`torch_spyre/__init__.py` registers the backend; this module loads lazily, at
the first process group that uses it.
"""

import threading
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


SUPPORTED = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
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
        return getattr(self._gloo, gloo_name)(*args)

    method.__name__ = name
    return method


class _Staging:
    """Host twins of one collective's tensors, and the copies back at wait()."""

    def __init__(self):
        self.staged = False  # any twin: the work is a SpyreCCLWork
        self._reads = False
        self._back = []  # (tensor, host twin) pairs copied back at wait()

    def __call__(self, tensor, *, read=True, write=True, private=False):
        """The tensor gloo should use in place of `tensor`.

        read: the collective reads it (copy the data over now).
        write: the collective writes it (copy the result back at wait()).
        private: use a twin even for a CPU tensor (its data must stay intact).
        """
        if not (_is_spyre(tensor) or private):
            return tensor
        self.staged = True
        # Contiguous, pinned (so the copy back needs no host wait) and
        # allocated per call: gloo writes into it from its own threads.
        host = torch.empty(
            tensor.shape, dtype=tensor.dtype, pin_memory=_is_spyre(tensor)
        )
        if read:
            host.copy_(tensor, non_blocking=True)
            self._reads = self._reads or _is_spyre(tensor)
        if write:
            self._back.append((tensor, host))
        return host

    def ready(self) -> None:
        """Block until the device-to-host copies issued so far have run."""
        if self._reads:
            done = torch.spyre.Event()
            done.record()  # the caller's current stream
            done.synchronize()
            self._reads = False

    def finish(self) -> None:
        for tensor, host in self._back:
            # On the current stream of whoever waits; pinned source: returns at
            # once, and the copy keeps `host` alive until it has run.
            tensor.copy_(host, non_blocking=True)


class SpyreCCLWork(Work):
    """An async spyreccl collective.

    `wait()` blocks the host until gloo has finished, then enqueues the copies
    of the results into the spyre tensors on the caller's current stream: work
    enqueued after `wait()` on that stream sees the results. Waiting again
    does nothing; a failure is raised by every `wait()` and nothing is copied.
    """

    def __init__(self, inner: Work, staging: _Staging, name: str):
        super().__init__()
        self._inner = inner
        self._staging = staging
        self._name = name
        self._lock = threading.Lock()
        self._done = False
        self._error = None

    def wait(self, timeout: timedelta = _NO_TIMEOUT) -> bool:
        with self._lock:
            if self._error is not None:
                raise self._error
            if not self._done:
                try:
                    self._inner.wait(timeout)
                    self._staging.finish()
                except BaseException as e:
                    self._error = e
                    raise
                self._done = True
                self._staging = None  # drop the host buffers
            return True

    def is_completed(self) -> bool:
        return self._done or self._error is not None

    def is_success(self) -> bool:
        return self._done

    def exception(self):
        return self._error

    def __repr__(self):
        state = "failed" if self._error else "done" if self._done else "pending"
        return f"SpyreCCLWork({self._name}, {state})"


class ProcessGroupSpyreCCL(ProcessGroup):
    """Collectives on spyre tensors, staged through host memory, run by gloo.

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

    def _run(self, name, staging, launch) -> Work:
        staging.ready()
        inner = launch()
        if not staging.staged:
            return inner  # CPU tensors used as they are: gloo's own work
        return SpyreCCLWork(inner, staging, name)

    @staticmethod
    def _premul(opts, staging, hosts) -> None:
        """PREMUL_SUM (not in gloo): SUM over private copies scaled by the factor."""
        op = opts.reduceOp
        if op != ReduceOp.PREMUL_SUM:
            return
        factor = op.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.to("cpu")
        staging.ready()
        for host in hosts:
            host.mul_(factor)
        opts.reduceOp = ReduceOp.SUM

    # ---------------------------------------------------------- collectives

    def allreduce(self, tensors, opts):
        staging = _Staging()
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        hosts = [staging(t, private=private) for t in tensors]
        self._premul(opts, staging, hosts)
        return self._run("allreduce", staging, lambda: self._gloo.allreduce(hosts, opts))

    def broadcast(self, tensors, opts):
        staging = _Staging()
        root = self.rank() == opts.rootRank
        # The root only sends, the others only receive.
        hosts = [staging(t, read=root, write=not root) for t in tensors]
        return self._run("broadcast", staging, lambda: self._gloo.broadcast(hosts, opts))

    def reduce(self, tensors, opts):
        staging = _Staging()
        root = self.rank() == opts.rootRank
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        # Only the root receives the result; the others' tensors stay as they were.
        hosts = [staging(t, write=root, private=private) for t in tensors]
        self._premul(opts, staging, hosts)
        return self._run("reduce", staging, lambda: self._gloo.reduce(hosts, opts))

    def allgather(self, output_tensors, input_tensors, opts):
        staging = _Staging()
        outputs = [[staging(t, read=False) for t in ts] for ts in output_tensors]
        inputs = [staging(t, write=False) for t in input_tensors]
        return self._run(
            "allgather", staging, lambda: self._gloo.allgather(outputs, inputs, opts)
        )

    def _allgather_base(self, output, input, opts):
        staging = _Staging()
        host_out = staging(output, read=False)
        host_in = staging(input, write=False)
        return self._run(
            "all_gather_single",
            staging,
            lambda: self._gloo._allgather_base(host_out, host_in, opts),
        )

    all_gather_single = _allgather_base

    def _reduce_scatter_base(self, output, input, opts):
        staging = _Staging()
        host_out = staging(output, read=False)
        private = opts.reduceOp == ReduceOp.PREMUL_SUM
        host_in = staging(input, write=False, private=private)
        self._premul(opts, staging, [host_in])
        return self._run(
            "reduce_scatter_single",
            staging,
            lambda: self._gloo._reduce_scatter_base(host_out, host_in, opts),
        )

    reduce_scatter_single = _reduce_scatter_base

    def barrier(self, opts):
        # A host barrier: it does not wait for device work (synchronize first).
        return self._gloo.barrier(opts)

    # The other collectives and point-to-point ops of torch.distributed.
    gather = _cpu_only("gather", "gather")
    scatter = _cpu_only("scatter", "scatter")
    reduce_scatter = _cpu_only("reduce_scatter", "reduce_scatter")
    alltoall = _cpu_only("alltoall", "alltoall")
    all_to_all_single = _cpu_only("all_to_all_single", "alltoall_base")
    send = _cpu_only("send", "send")
    recv = _cpu_only("recv", "recv")
    recv_anysource = _cpu_only("recv_anysource", "recv_anysource")
    allreduce_coalesced = _cpu_only("allreduce_coalesced", "allreduce_coalesced")
    allgather_coalesced = _cpu_only("allgather_coalesced", "allgather_coalesced")
