"""Issue 18: faults in torchrun jobs, and a job across two "nodes".

A rank that dies mid-collective makes the others fail with a clear error
within the process group's timeout; `torchrun --max-restarts=1` restarts a job
whose rank fails once and the job completes; two torchrun launches joined by a
c10d rendezvous train DDP across four ranks.
"""

import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import DEVICE_ENV
from _helpers import NPROC, PRELUDE, WAIT_UNTIL, rank_results, torchrun

pytestmark = pytest.mark.slow  # torchrun jobs

PG_TIMEOUT = 30  # seconds


def test_a_rank_dying_mid_collective_fails_the_others_clearly(tmp_path):
    torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            f"""
        import time
        from datetime import timedelta
        dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
        r = dist.get_rank()
        t = torch.ones(4, device="spyre")
        dist.all_reduce(t)  # both ranks are alive here
        store = dist.distributed_c10d._get_default_store()
        if r == 1:
            store.wait(["rank0 enters"])  # rank 0 is at the next all_reduce
            os._exit(0)                   # dies without joining it
        store.set("rank0 enters", "1")
        start = time.monotonic()
        out["error"] = error(lambda: dist.all_reduce(t))
        out["seconds"] = time.monotonic() - start
        out["t"] = t.cpu().tolist()  # nothing was copied back
        save()
        os._exit(0)  # the peer is gone: skip the group's teardown
        """
        ),
        timeout=PG_TIMEOUT + 60,
    )
    res = (tmp_path / "rank0.json").read_text()
    import json

    res = json.loads(res)
    kind, message = res["error"]
    assert kind == "RuntimeError"
    # gloo names the peer's connection (closed or reset), not a hang.
    assert "Connection closed by peer" in message or "Connection reset by peer" in message, message
    assert res["seconds"] < PG_TIMEOUT
    assert res["t"] == [2.0] * 4


# 2 elements: staged at once; 17 MiB: staged, reduced and copied back in pieces.
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


# Rank 1 passes strided views (transposed, every other column) where rank 0
# passes contiguous tensors of the same shapes, and the reverse.
STRIDED = PRELUDE + f"""
from datetime import timedelta
dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
r = dist.get_rank()

def strided(values, ranks=(1,)):
    # The values of `values` (2-D, CPU), on spyre, strided on `ranks`.
    if r not in ranks:
        return values.to("spyre")
    if values.shape[0] == values.shape[1]:
        return values.t().contiguous().to("spyre").t()  # transposed
    wide = torch.zeros(values.shape[0], 2 * values.shape[1])
    wide[:, ::2] = values
    return wide.to("spyre")[:, ::2]  # every other column

def grid(rows, cols, offset=0.0):
    return torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + offset

def read(t):
    return [list(t.stride()), t.cpu().tolist()]

a = strided(grid(3, 3, 10.0 * r))
dist.all_reduce(a)
out["all_reduce"] = read(a)
a = strided(grid(2, 3, 10.0 * r), ranks=(0,))
dist.all_reduce(a, op=dist.ReduceOp.MAX)
out["all_reduce.MAX"] = read(a)
# 18 MiB: two pieces on gloo; the strided rank stages and copies back whole.
n = 2304
big = grid(n, 2048)
a = strided(big + r) if r == 0 else (big.t().contiguous() + r).to("spyre").t()
out["large.contiguous"] = a.is_contiguous()
dist.all_reduce(a)
out["large"] = torch.equal(a.cpu(), big * 2 + 1)
b = strided(grid(2, 3, 10.0 * r))
dist.broadcast(b, src=1)
out["broadcast.from_strided"] = read(b)
b = strided(grid(2, 3, 10.0 * r))
dist.broadcast(b, src=0)
out["broadcast.into_strided"] = read(b)
outs = [strided(torch.zeros(2, 3)) for _ in range(2)]
dist.all_gather(outs, strided(grid(2, 3, 10.0 * r)))
out["all_gather"] = [read(o) for o in outs]
o = strided(torch.zeros(4, 3))
dist.all_gather_into_tensor(o, strided(grid(2, 3, 10.0 * r)))
out["all_gather_into_tensor"] = read(o)
o = strided(torch.zeros(1, 3))
dist.reduce_scatter_tensor(o, strided(grid(2, 3, 10.0 * r)))
out["reduce_scatter_tensor"] = read(o)
# A tensor whose elements share memory cannot be written: refused on every
# rank before any data moves, small or in pieces; read-only it is fine.
e = torch.ones(1, device="spyre").expand(3) if r == 1 else torch.ones(3, device="spyre")
out["overlap"] = [error(lambda: dist.all_reduce(e)), e.cpu().tolist()]
e = (torch.ones(1, device="spyre").expand(5 * 2**20) if r == 0
     else torch.ones(5 * 2**20, device="spyre"))
out["overlap.large"] = error(lambda: dist.all_reduce(e))
e = torch.full((1,), 10.0 * r + 1, device="spyre").expand(3)
x = torch.zeros(3, device="spyre") if r == 0 else e
dist.broadcast(x, src=1)
out["overlap.read_only"] = x.cpu().tolist()
a = torch.full((2,), r + 1.0, device="spyre")
dist.all_reduce(a)
out["after"] = a.cpu().tolist()
dist.destroy_process_group()
save()
"""


def test_strided_tensors_on_one_rank_give_exact_results(tmp_path):
    # Every spyre tensor is staged through a contiguous host twin and copied
    # back element by element, so strides never reach gloo; whether an
    # all_reduce goes in pieces depends on its size, not on the strides
    # (before, a strided 18 MiB tensor on one rank left the ranks' gloo
    # operations out of step: a hang or an abort).
    torchrun(tmp_path, STRIDED)
    results = rank_results(tmp_path)
    total = [[10.0, 12.0, 14.0], [16.0, 18.0, 20.0], [22.0, 24.0, 26.0]]  # g + (g + 10)
    assert [res["all_reduce"] for res in results] == [[[3, 1], total], [[1, 3], total]]
    top = [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]
    assert [res["all_reduce.MAX"] for res in results] == [[[6, 2], top], [[3, 1], top]]
    assert [res["large.contiguous"] for res in results] == [True, False]
    assert [res["large"] for res in results] == [True, True]
    assert [res["broadcast.from_strided"] for res in results] == [[[3, 1], top], [[6, 2], top]]
    low = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert [res["broadcast.into_strided"] for res in results] == [[[3, 1], low], [[6, 2], low]]
    assert [res["all_gather"] for res in results] == [
        [[[3, 1], low], [[3, 1], top]], [[[6, 2], low], [[6, 2], top]]]
    assert [res["all_gather_into_tensor"] for res in results] == [
        [[3, 1], low + top], [[6, 2], low + top]]
    # (g + g + 10) in halves: rank 0 the first row, rank 1 the second.
    assert [res["reduce_scatter_tensor"] for res in results] == [
        [[3, 1], [[10.0, 12.0, 14.0]]], [[6, 2], [[16.0, 18.0, 20.0]]]]
    overlap = [
        "RuntimeError",
        "spyreccl: allreduce failed before moving any data (rank 1: the result cannot be "
        "written into a tensor whose elements overlap in memory (shape [3], strides [0]): pass "
        "one whose elements are distinct (e.g. .clone() it))",
    ]
    assert [res["overlap"] for res in results] == [[overlap, [1.0] * 3], [overlap, [1.0] * 3]]
    overlap_large = [
        "RuntimeError",
        "spyreccl: allreduce failed before moving any data (rank 0: the result cannot be "
        "written into a tensor whose elements overlap in memory (shape [5242880], strides [0]): "
        "pass one whose elements are distinct (e.g. .clone() it))",
    ]
    assert [res["overlap.large"] for res in results] == [overlap_large] * 2
    assert [res["overlap.read_only"] for res in results] == [[11.0] * 3] * 2
    assert [res["after"] for res in results] == [[3.0, 3.0]] * 2


def test_torchrun_max_restarts_recovers_from_a_rank_failing_once(tmp_path):
    proc = torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            """
        import sys
        attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
        dist.init_process_group()
        r = dist.get_rank()
        t = torch.full((2,), r + 1.0, device="spyre")
        dist.all_reduce(t)
        if attempt == 0 and r == 1:
            sys.exit(3)  # fails once, on purpose
        dist.barrier()
        out["attempt"] = attempt
        out["sum"] = [str(t.device), t.cpu().tolist()]
        dist.destroy_process_group()
        save()
        """
        ),
        launcher_args=("--standalone", "--max-restarts=1"),
        # torch 2.13's torchrun shares its rendezvous store with the workers
        # across restarts, with no per-attempt prefix: gloo (CPU-only jobs too)
        # then reads the previous attempt's addresses and fails or hangs.
        # This is torch's opt-out (docs/distributed.md, "Bad input and failures").
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        timeout=180,
    )
    assert proc.returncode == 0
    assert rank_results(tmp_path) == [
        {"attempt": 1, "sum": ["spyre:0", [3.0, 3.0]]},
        {"attempt": 1, "sum": ["spyre:1", [3.0, 3.0]]},
    ]


TWO_NODES = PRELUDE + """
from torch import nn
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("spyre")
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(world * 4, 8, generator=g), torch.randn(world * 4, 2, generator=g)
mine = slice(rank * 4, (rank + 1) * 4)
for _ in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x[mine].to("spyre")), y[mine].to("spyre")).backward()
    opt.step()
out["where"] = [rank, world, LOCAL_RANK, str(next(model.parameters()).device)]
out["params"] = [p.detach().cpu().tolist() for p in model.parameters()]
dist.destroy_process_group()
save()
"""


@pytest.mark.slow
@pytest.mark.timeout(400)  # its own deadline is 300 s
def test_two_nodes_of_two_ranks_train_ddp_across_four_ranks(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "worker.py"
    path.write_text(TWO_NODES)
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    env["OUT_DIR"] = str(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
             f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes", str(path)],
            cwd=tmp_path, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for node in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=300))
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the two-node job timed out")
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr
    import json

    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    # Global ranks 0..3; on each node local ranks 0 and 1, each on spyre:LOCAL_RANK.
    wheres = sorted(res["where"] for res in results)
    assert [w[:2] for w in wheres] == [[r, 4] for r in range(4)]
    assert sorted((w[2], w[3]) for w in wheres) == [
        (0, "spyre:0"), (0, "spyre:0"), (1, "spyre:1"), (1, "spyre:1")]
    for res in results[1:]:
        assert res["params"] == results[0]["params"]  # one model across the four ranks
