"""A collective that fails fails on every rank, with one error naming the rank and the stream
(docs/distributed.md, "Bad input and failures"): a device failure on one rank, before or after
the first piece of a pipelined all_reduce, a failed communication stream. A failed work's future
fails in C++ (as c10d's backends do), so DDP's reducer raises RuntimeError in `backward()`
instead of reading the exception object as a result (SIGSEGV)."""

import textwrap

import pytest

from _helpers import PRELUDE, WAIT_UNTIL, rank_results, torchrun
from conftest import run_python

PG_TIMEOUT = 30  # seconds


# 2 elements: staged at once; 17 MiB: staged, reduced and copied back in pieces.
@pytest.mark.slow  # a torchrun job
@pytest.mark.parametrize("numel", [2, 17 * 2**20 // 4], ids=["small", "pipelined"])
def test_a_device_failure_on_one_rank_fails_the_collective_on_every_rank(tmp_path, numel):
    # Rank 0's stream fails (an injected fault) before the collective's staging
    # copies run: they are discarded, so rank 0 cannot take part. Every rank
    # gets the same error instead of rank 1 reducing garbage or waiting for the
    # timeout, nothing is copied back, and the group keeps working.
    torchrun(
        tmp_path,
        PRELUDE
        + WAIT_UNTIL
        + f"NUMEL = {numel}\n"
        + textwrap.dedent(
            """
        from torch_spyre.testing import Gate, inject_fault
        dist.init_process_group()
        r = dist.get_rank()
        s = torch.spyre.Stream()
        with torch.spyre.stream(s):
            t = torch.full((NUMEL,), r + 1.0, device="spyre")
            with Gate() as gate:
                gate.block(s)  # holds the fault and the staging copies until both are queued
                # the gate runs: the fault hits the next op
                wait_until(lambda: gate.blocked_streams >= 1, what="the gate to run")
                if r == 0:
                    inject_fault(s, "injected: the card failed")
                    t.fill_(5.0)  # fails when the gate opens
                work = dist.all_reduce(t, async_op=True)
                gate.release()
            out["wait"] = error(work.wait)
            out["stream"] = [s.stream_id, error(s.synchronize)]
        if r == 1:
            out["untouched"] = bool((t.cpu() == 2.0).all())
        t = torch.full((2,), r + 1.0, device="spyre")
        dist.all_reduce(t)
        out["after"] = t.cpu().tolist()
        dist.destroy_process_group()
        save()
        """
        ),
    )
    results = rank_results(tmp_path)
    stream_id = results[0]["stream"][0]
    failed = [
        "RuntimeError",
        f"spyreccl: allreduce failed before moving any data (rank 0: its inputs were never "
        f"read: stream {stream_id} failed before the collective)",
    ]
    assert [res["wait"] for res in results] == [failed, failed]
    # The stream's own error is still reported to its owner, once.
    assert results[0]["stream"][1] == ["RuntimeError", "injected: the card failed"]
    assert results[1]["stream"][1] is None
    assert results[1]["untouched"]
    assert [res["after"] for res in results] == [[3.0, 3.0], [3.0, 3.0]]


# direct: gloo in the window; staged: SPYRECCL_STAGING=1 (the copies back would run on the failed
# stream); strided and PREMUL_SUM stage by themselves; pipelined: staged in pieces.
@pytest.mark.slow  # a torchrun job
@pytest.mark.parametrize("case", ["direct", "staged", "strided", "premul_sum", "pipelined",
                                  "pipelined_direct"])
def test_a_failed_communication_stream_fails_the_collective_on_every_rank(tmp_path, case):
    # Rank 0's communication stream fails before the collective's peer access
    # window: the window never opens, so gloo never touches rank 0's memory
    # and no copy back is queued there. Every rank gets the same error instead
    # of rank 0 passing for success with its tensor never written (staged, before)
    # or waiting for the timeout, rank 1's tensor is untouched, and so is every
    # later collective of the group (its communication stream stays failed, as
    # a card's would).
    numel = 17 * 2**20 // 4 if case.startswith("pipelined") else 4
    env = {"SPYRECCL_STAGING": "1"} if case in ("staged", "pipelined") else {}
    torchrun(
        tmp_path,
        PRELUDE
        + WAIT_UNTIL
        + f"NUMEL, CASE = {numel}, {case!r}\n"
        + textwrap.dedent(
            """
        from torch_spyre.testing import Gate, inject_fault
        dist.init_process_group()
        r = dist.get_rank()
        comm = dist.group.WORLD._comm()
        op = dist.ReduceOp.SUM
        if CASE == "strided":
            t = torch.full((NUMEL, 2), r + 1.0, device="spyre")[:, 0]
        else:
            t = torch.full((NUMEL,), r + 1.0, device="spyre")
        if CASE == "premul_sum":
            op = dist._make_nccl_premul_sum(1.0)
        with Gate() as gate:
            if r == 0:
                gate.block(comm)
                wait_until(lambda: gate.blocked_streams == 1, what="the gate to run")
                inject_fault(comm, "injected: link down")  # hits the collective's first op there
            work = dist.all_reduce(t, op=op, async_op=True)
            gate.release()
        out["wait"] = [error(work.wait), work.is_success()]
        out["t"] = sorted(set(t.cpu().tolist()))
        out["again"] = error(lambda: dist.all_reduce(t))
        out["comm"] = [comm.stream_id, error(comm.synchronize)]
        dist.destroy_process_group()
        save()
        """
        ),
        env=env,
    )
    results = rank_results(tmp_path)
    comm_id = results[0]["comm"][0]
    failed = [
        "RuntimeError",
        f"spyreccl: allreduce failed before moving any data (rank 0: its communication stream "
        f"{comm_id} failed before the collective: injected: link down)",
    ]
    assert [res["wait"] for res in results] == [[failed, False], [failed, False]]
    assert [res["t"] for res in results] == [[1.0], [2.0]]
    again = failed[1].replace("injected: link down",
                              "Cannot schedule operation on stream in error state: injected: link down")
    assert [res["again"] for res in results] == [["RuntimeError", again]] * 2
    # The stream's own error is reported to whoever synchronizes it, once.
    assert results[0]["comm"][1] == ["RuntimeError", "injected: link down"]
    assert results[1]["comm"][1] is None


@pytest.mark.slow  # a torchrun job
def test_a_device_failure_after_the_first_piece_fails_the_all_reduce_on_every_rank(tmp_path):
    # A 17 MiB all_reduce goes in two pieces (16 MiB, then 1 MiB), staged
    # (SPYRECCL_STAGING=1: a direct one has all its pieces ready at once, so
    # no piece can be read in part). Rank 0's stream fails (an injected fault) after its first piece was staged and
    # checked, before its second piece is staged: a gate is enqueued on its
    # stream right after the first piece's staging copy, and the fault is
    # injected once the progress thread has issued the exchange that follows
    # the check of the first piece. Every rank gets the same error naming
    # rank 0 and its stream, the first piece (reduced from inputs both ranks
    # read) was copied back and the last one not, and the group keeps
    # working, in pieces too.
    torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            f"""
        import time
        from datetime import timedelta
        import torch_spyre.distributed as ccl
        from torch_spyre.testing import Gate, inject_fault
        NUMEL = 17 * 2**20 // 4
        dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
        r = dist.get_rank()
        held, checked = Gate(), threading.Event()
        stage, exchange, staged, exchanges = ccl.pipeline._stage, ccl.pipeline._Exchange, [], []

        def stage_then_hold(host, tensor):
            event = stage(host, tensor)
            if r == 0 and not staged:
                held.block()  # after the first piece's copy and event: the second waits
            staged.append(tensor.numel())
            return event

        class Exchange(exchange):
            def __init__(self, gloo, described):
                super().__init__(gloo, described)
                exchanges.append(described)
                if len(exchanges) == 2:  # the signature, then "was the first piece read"
                    checked.set()

        ccl.pipeline._stage, ccl.pipeline._Exchange = stage_then_hold, Exchange
        s = torch.spyre.Stream()
        with torch.spyre.stream(s):
            t = torch.full((NUMEL,), r + 1.0, device="spyre")
            work = dist.all_reduce(t, async_op=True)
            if r == 0:
                out["checked"] = checked.wait({PG_TIMEOUT})
                inject_fault(s, "injected: the card failed")  # hits the second piece's copy
                held.release()
            out["wait"] = [error(work.wait), error(work.wait), work.is_success()]
            out["stream"] = [s.stream_id, error(s.synchronize)]
        ccl.pipeline._stage, ccl.pipeline._Exchange = stage, exchange
        out["staged"] = staged
        out["exchanges"] = exchanges
        # The first piece's copy back (the communication stream waited for the
        # failed stream's event, which completed), then read on this stream.
        dist.group.WORLD._comm_stream.synchronize()
        values, counts = torch.unique_consecutive(t.cpu(), return_counts=True)
        out["t"] = [values.tolist(), counts.tolist()]
        t = torch.full((2,), r + 1.0, device="spyre")
        dist.all_reduce(t)
        out["after"] = t.cpu().tolist()
        t = torch.full((NUMEL,), r + 1.0, device="spyre")
        dist.all_reduce(t)
        out["after_in_pieces"] = bool((t.cpu() == 3.0).all())
        dist.destroy_process_group()
        save()
        """
        ),
        env={"SPYRECCL_STAGING": "1"},
        timeout=PG_TIMEOUT + 90,
    )
    results = rank_results(tmp_path)
    stream_id = results[0]["stream"][0]
    failed = [
        "RuntimeError",
        f"spyreccl: allreduce failed partway (rank 0: its inputs were only partly read: stream "
        f"{stream_id} failed during the collective): the pieces reduced before were copied back "
        "and the last one was not, so the tensor's contents are undefined on every rank",
    ]
    assert [res["wait"] for res in results] == [[failed, failed, False]] * 2
    assert results[0]["stream"][1] == ["RuntimeError", "injected: the card failed"]
    assert results[1]["stream"][1] is None
    first, rest = 4 * 2**20, 2**18  # 16 MiB and 1 MiB of float32
    assert [res["staged"] for res in results] == [[first, rest]] * 2
    partly = (f"!its inputs were only partly read: stream {stream_id} failed during the "
              "collective")
    assert [res["exchanges"] for res in results] == [
        ["allreduce(SUM, torch.float32 [4456448])", "", partly],
        ["allreduce(SUM, torch.float32 [4456448])", "", ""],
    ]
    assert results[0]["checked"] is True
    # The first piece holds the sum (1 + 2); the last keeps each rank's input.
    assert [res["t"] for res in results] == [[[3.0, 1.0], [first, rest]],
                                             [[3.0, 2.0], [first, rest]]]
    assert [res["after"] for res in results] == [[3.0, 3.0]] * 2
    assert [res["after_in_pieces"] for res in results] == [True, True]


def test_a_failed_futures_error_is_seen_by_cpp_waiters():
    # What a failed SpyreCCLWork does to its future (work._settle): a C++
    # error, so C++ (here collect_all, c10::collectAll; DDP's reducer alike)
    # sees a failed future, where Python's set_exception would complete it
    # with the exception object as its value.
    import torch

    future = torch.futures.Future(devices=[torch.device("spyre", 0)])
    chained = future.then(lambda f: f.value())
    torch.spyre._C._future_set_error(future, "spyreccl: allreduce failed: boom")
    assert future.done()
    with pytest.raises(RuntimeError, match="^spyreccl: allreduce failed: boom$"):
        future.wait()
    with pytest.raises(RuntimeError, match="^spyreccl: allreduce failed: boom$"):
        torch.futures.collect_all([future]).wait()
    with pytest.raises(RuntimeError, match="spyreccl: allreduce failed: boom"):
        chained.wait()
    with pytest.raises(TypeError, match="incompatible function arguments"):
        torch.spyre._C._future_set_error(3, "x")


# One process: DDP over spyreccl, the default stream gated, a fault injected
# on it, backward() run while a second thread releases the gate once DDP has
# called the all_reduce. The fault drops the backward's kernels, so the
# collective fails ("its inputs were never read") and backward() must raise.
DDP_FAULT = WAIT_UNTIL + """
import threading
import torch, torch_spyre
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch_spyre.distributed import ProcessGroupSpyreCCL
from torch_spyre.testing import Gate, inject_fault

dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
called = threading.Event()
allreduce = ProcessGroupSpyreCCL.allreduce

def allreduce_then_tell(self, tensors, opts):
    work = allreduce(self, tensors, opts)
    called.set()
    return work

ProcessGroupSpyreCCL.allreduce = allreduce_then_tell
torch.manual_seed(0)
model = DDP(nn.Linear(4, 2).to("spyre"))
loss = model(torch.ones(3, 4, device="spyre")).sum()
gate = Gate()
gate.block()
# until the gate runs: the fault then hits the next op (backward's first)
wait_until(lambda: gate.blocked_streams >= 1, what="the gate to run")
print("gated", gate.blocked_streams, flush=True)
inject_fault(torch.spyre.current_stream(), "injected: the card failed")

def release():
    print("called", called.wait(60), flush=True)
    gate.release()

releaser = threading.Thread(target=release)
releaser.start()
try:
    loss.backward()
    print("backward returned")
except RuntimeError as e:
    print("RuntimeError:", e)
releaser.join()
try:
    torch.spyre.synchronize()
except RuntimeError as e:
    print("stream:", e)
print("done", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("staging", ["0", "1"])
def test_ddp_raises_when_its_all_reduce_fails(staging):
    proc = run_python(DDP_FAULT, env={"SPYRECCL_STAGING": staging}, timeout=120, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stdout.splitlines()
    assert lines[:2] == ["gated 1", "called True"], lines
    assert lines[2:] == [
        "RuntimeError: spyreccl: allreduce failed before moving any data (rank 0: its inputs "
        "were never read: stream 0 failed before the collective)",
        "stream: injected: the card failed",
        "done",
    ]
