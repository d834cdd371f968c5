"""ProcessGroupSpyreCCL: the c10d process group of the spyreccl backend, and
the creator c10d calls."""

import os
import threading

import torch
from torch._C._distributed_c10d import ProcessGroup, ProcessGroupGloo, ReduceOp, Work

from . import pipeline
from .consistency import _Exchange, _refuse_mismatch
from .gloo_calls import GlooCalls
from .progress import _Progress
from .staging import (
    _any_spyre,
    _describe,
    _direct,
    _is_spyre,
    _overlapping,
    _Staging,
    _staging_forced,
)
from .work import _AllOf
from .._timing import _charge_collective

BACKEND_NAME = "spyreccl"


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


class ProcessGroupSpyreCCL(ProcessGroup):
    """Collectives on spyre tensors, run by gloo on their memory or on host copies.

    c10d uses a Python process group as the group's only backend, so this
    group also serves CPU tensors (directly with its gloo group); its gloo
    group is also registered for "cpu" so collectives not listed below still
    work on CPU tensors.
    """

    def __init__(self, store, rank, size, timeout, group_name="", global_ranks_in_group=()):
        super().__init__(rank, size)
        gloo = ProcessGroupGloo(store, rank, size, timeout)
        gloo.options.global_ranks_in_group = list(global_ranks_in_group)
        if group_name:
            gloo.options.group_name = group_name
        self._register_backend(torch.device("cpu"), ProcessGroup.BackendType.GLOO, gloo)
        # Every collective spyreccl issues goes through this (gloo_calls.py).
        self._gloo = GlooCalls(gloo)
        self._set_default_backend(ProcessGroup.BackendType.GLOO)
        self._progress = _Progress(timeout)
        self._comm_stream = None
        self._comm_stream_lock = threading.Lock()
        # SPYRECCL_CHECK=0 skips the cross-rank comparison of each collective
        # (one small gloo all-gather per staged collective).
        self._check = os.environ.get("SPYRECCL_CHECK", "1") != "0"
        # SPYRECCL_STAGING=1 stages every spyre tensor through host memory
        # (gloo never works on device memory in place).
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
            if torch.spyre._C._card_timing():
                _charge_collective(comm, name, outputs, self.size())
            # Used on comm (written, or read in place by gloo in the window on comm): its
            # block is handed on only after an event on comm, after the window.
            read_in_place = [t for t, write in staging.in_place if not write]
            for tensor in staging.written + read_in_place:
                tensor.record_stream(comm)
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
            and tensors[0].nbytes >= pipeline._PIPELINE_BYTES
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
        one goes in the same pieces too, of its memory, all reduced inside
        the collective's peer access window on the communication stream."""
        _check_reduce_op(opts.reduceOp, [tensor])
        problem = _overlapping(tensor)
        if problem is not None and not self._check:
            raise ValueError(f"spyreccl: allreduce: {problem}")
        described = f"allreduce({opts.reduceOp.op.name}, {_describe(tensor)})"
        if problem is not None:
            described = "!" + problem  # refused on every rank
        caller = torch.spyre.current_stream()
        direct = self._direct and _direct(tensor)
        staging = self._staging()
        pieces = pipeline.stage_pieces(tensor, staging, direct)
        staging.staged = staging.spyre = True  # `waits_for_caller` stays False: launch waits per piece
        staging.written = [tensor]  # `back` stays empty: the pieces go back one by one
        if direct:
            staging.in_place = [(tensor, True)]  # gloo reduces the pieces in place
        gloo, check = self._gloo, self._check

        def launch(failure=None):
            # failure: this rank cannot take part (its comm stream failed);
            # the exchanges then fail the collective on every rank.
            return pipeline.reduce_pieces(gloo, check, described, caller, pieces, opts, direct,
                                          failure)

        launch.reports_failure = True
        return self._run("allreduce", staging, [tensor], launch)

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
        self._gloo.backend.shutdown()

    # The other collectives and point-to-point ops of torch.distributed.
    reduce_scatter = _cpu_only("reduce_scatter", "reduce_scatter")
    alltoall = _cpu_only("alltoall", "alltoall")
    send = _cpu_only("send", "send")
    recv = _cpu_only("recv", "recv")
    recv_anysource = _cpu_only("recv_anysource", "recv_anysource")
    allreduce_coalesced = _cpu_only("allreduce_coalesced", "allreduce_coalesced")
    allgather_coalesced = _cpu_only("allgather_coalesced", "allgather_coalesced")
