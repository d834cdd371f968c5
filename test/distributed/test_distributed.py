"""Issue 7: torchrun jobs, one process per device, and the spyreccl c10d backend.

Each test launches `python -m torch.distributed.run --standalone
--nproc-per-node=2` on a small worker script; every rank writes what it saw to
rank<N>.json and the test checks exact values for both ranks.
"""

import re
import textwrap

import pytest
import torch.distributed as dist

from conftest import run_python

from _helpers import (  # noqa: F401  (re-exported: other files import them from here)
    NPROC, PRELUDE, ROOT, kill_workers, rank_results, torchrun)


# ---------------------------------------------------------------- registration


def test_spyreccl_is_registered_as_the_default_for_spyre():
    assert "spyreccl" in dist.Backend.backend_list
    assert dist.Backend.SPYRECCL == "spyreccl"
    assert dist.Backend.default_device_backend_map["spyre"] == "spyreccl"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.Backend.backend_capability["spyreccl"] == ["spyre"]
    assert dist.Backend._plugins["SPYRECCL"].extended_api is True


def test_the_backend_module_loads_with_the_first_process_group_not_with_torch():
    # In a process of its own: other tests of this one may have made a process group.
    loaded = run_python("""
import sys
import torch
import torch.distributed
print("torch_spyre.distributed" in sys.modules)
""").stdout.split()
    assert loaded == ["False"]


# ---------------------------------------------------------------- one job, every collective

COLLECTIVES = PRELUDE + """
from torch_spyre.testing import Gate

def spyre(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device="spyre")

def read(t):
    return [str(t.device), t.cpu().tolist()]

# Binding from LOCAL_RANK, before any set_device: this thread and a new one.
def binding():
    return [torch.spyre.current_device(), str(torch.ones(1, device="spyre").device),
            torch.spyre.current_stream().device_index]

out["binding"] = binding()
box = {}
worker = threading.Thread(target=lambda: box.update(binding=binding()))
worker.start(); worker.join()
out["thread_binding"] = box["binding"]
out["device_count"] = torch.spyre.device_count()

dist.init_process_group()   # no backend: cpu -> gloo, spyre -> spyreccl
r = dist.get_rank()
pg = dist.group.WORLD
out["backend"] = [type(pg).__name__, pg.name(), dist.get_backend_config(),
                  dist.get_default_backend_for_device("spyre"),
                  dist.get_default_backend_for_device("cpu"), [str(d) for d in pg._device_types],
                  dist.get_backend()]

def run(name, collective, *tensors):
    # Each collective twice: blocking, then async_op=True (wait() twice: idempotent).
    for mode in ("sync", "async"):
        ts = [t() for t in tensors]
        work = collective(*ts, async_op=mode == "async")
        if mode == "async":
            waits = [work.wait(), work.wait()]
            out[f"{name}.work"] = [type(work).__name__, *waits, work.is_completed()]
        out[f"{name}.{mode}"] = [read(t) for t in ts]

R = dist.ReduceOp
for op in ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]:
    run(f"all_reduce.{op}", lambda t, **kw: dist.all_reduce(t, op=getattr(R, op), **kw),
        lambda: spyre([r + 1, 4 - r]))
# Each rank scales its own input before the sum.
run("all_reduce.PREMUL_SUM",
    lambda t, **kw: dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([r + 1.0])),
                                    **kw),
    lambda: spyre([r + 1, 4 - r]))
for op in ["BAND", "BOR", "BXOR"]:
    run(f"all_reduce.{op}", lambda t, **kw: dist.all_reduce(t, op=getattr(R, op), **kw),
        lambda: spyre([r + 1, 6], torch.int32))
run("broadcast", lambda t, **kw: dist.broadcast(t, src=1, **kw),
    lambda: spyre([10 * r + 1.0] * 3))
run("reduce", lambda t, **kw: dist.reduce(t, dst=0, **kw), lambda: spyre([r + 1, 10 * (r + 1)]))
run("reduce.MAX", lambda t, **kw: dist.reduce(t, dst=1, op=R.MAX, **kw),
    lambda: spyre([r + 1, 10 - r]))
run("all_gather", lambda a, b, x, **kw: dist.all_gather([a, b], x, **kw),
    lambda: torch.zeros(2, device="spyre"), lambda: torch.zeros(2, device="spyre"),
    lambda: spyre([r, r + 0.5]))
run("all_gather.cpu_outputs", lambda a, b, x, **kw: dist.all_gather([a, b], x, **kw),
    lambda: torch.zeros(2), lambda: torch.zeros(2), lambda: spyre([r, r + 0.5]))
run("all_gather_into_tensor", lambda o, x, **kw: dist.all_gather_into_tensor(o, x, **kw),
    lambda: torch.zeros(4, device="spyre"), lambda: spyre([r, r + 0.5]))
run("reduce_scatter_tensor", lambda o, x, **kw: dist.reduce_scatter_tensor(o, x, **kw),
    lambda: torch.zeros(2, device="spyre"), lambda: torch.arange(4.0, device="spyre") + r)
run("reduce_scatter_tensor.MAX",
    lambda o, x, **kw: dist.reduce_scatter_tensor(o, x, op=R.MAX, **kw),
    lambda: torch.zeros(2, device="spyre"), lambda: torch.arange(4.0, device="spyre") * (r + 1))
run("gather", lambda o0, o1, x, **kw: dist.gather(x, [o0, o1] if r == 1 else None, dst=1, **kw),
    lambda: torch.zeros(2, device="spyre"), lambda: torch.zeros(2, device="spyre"),
    lambda: spyre([r + 1.0, 10.0 * (r + 1)]))
run("scatter", lambda o, a, b, **kw: dist.scatter(o, [a, b] if r == 0 else None, src=0, **kw),
    lambda: torch.zeros(2, device="spyre"), lambda: spyre([5.0, 6.0]), lambda: spyre([7.0, 8.0]))
run("all_to_all_single", lambda o, x, **kw: dist.all_to_all_single(o, x, **kw),
    lambda: torch.zeros(4, device="spyre"), lambda: torch.arange(4.0, device="spyre") + 10 * r)
run("all_reduce.cpu", lambda t, **kw: dist.all_reduce(t, **kw), lambda: torch.tensor([r + 1]))
run("all_reduce.cpu.PREMUL_SUM",
    lambda t, **kw: dist.all_reduce(t, op=dist._make_nccl_premul_sum(float(r + 1)), **kw),
    lambda: torch.tensor([r + 1.0, 4.0 - r]))
run("all_reduce.empty", lambda t, **kw: dist.all_reduce(t, **kw),
    lambda: torch.zeros(0, device="spyre"))
# A large all_reduce (17 MiB: reduced in uneven pieces, in place or staged).
n = 17 * 2**20 // 4
expected = torch.arange(n, dtype=torch.float32) * 2 + 1
pinned = torch.spyre.host_memory_stats()["num_host_alloc"]
for mode in ("sync", "async"):
    t = torch.arange(n, dtype=torch.float32, device="spyre") + r
    work = dist.all_reduce(t, async_op=mode == "async")
    if work is not None:
        work.wait()
    out[f"all_reduce.large.{mode}"] = torch.equal(t.cpu(), expected)
    # The staged copy's pinned buffer returns to the cache once its last copy has
    # run: wait for it, or the next call may find the buffer still in use.
    torch.spyre.synchronize()
out["all_reduce.large.pinned_allocs"] = torch.spyre.host_memory_stats()["num_host_alloc"] - pinned
work = dist.barrier(async_op=True)
out["barrier"] = [work.wait(), dist.barrier()]

# Stream order (docs/distributed.md, "Streams"), made deterministic with gates.
# 1. The inputs are read after the work queued before on the current stream,
#    and async_op=True returns while that work is still held by a gate.
s, other = torch.spyre.Stream(), torch.spyre.Stream()
with torch.spyre.stream(s):
    t = torch.zeros(2, device="spyre")
    with Gate() as gate:
        gate.block(s)
        t.fill_(r + 1)  # queued behind the gate
        work = dist.all_reduce(t, async_op=True)
        out["stream.returned_before_inputs"] = [work.is_completed(), s.query()]
        gate.release()
    out["stream.wait"] = work.wait()
    out["stream.result"] = (t * 1).cpu().tolist()  # on s, after wait(): the sum

# 2. wait() does not wait for the device: what the collective queued on the
#    group's communication stream after it (the copies back, or the end of its
#    peer access window) is held there; s waits for it, other streams do not.
comm = dist.group.WORLD._comm_stream
with torch.spyre.stream(s):
    t = torch.full((2,), 10.0 * (r + 1), device="spyre")
    with Gate() as gate:
        work = dist.all_reduce(t, async_op=True)
        gate.block(comm)  # after the collective's own operations there
        out["stream.wait_while_copy_back_held"] = work.wait()
        later = t * 2  # on s: ordered after the copy back
        out["stream.s_pending"] = s.query()
        # A race on purpose (the stream sanitizer, if on, is paused for it): other
        # reads t while the copy back is held.
        mode = torch.spyre._C._sanitizer_mode()
        torch.spyre._C._sanitizer_set_mode(0)
        with torch.spyre.stream(other):
            out["stream.other_stream_sees"] = t.cpu().tolist()  # the copy back is held
        torch.spyre._C._sanitizer_set_mode(mode)
        gate.release()
    out["stream.later"] = later.cpu().tolist()

# 3. get_future(): a torch.futures.Future whose value is the output tensors,
#    completed at the same point in stream order: the stream that waits on it
#    (here `other`) runs its later work after the copies back.
with torch.spyre.stream(s):
    t = torch.full((3,), float(r + 1), device="spyre")
    with Gate() as gate:
        work = dist.all_reduce(t, async_op=True)
        gate.block(comm)
        fut = work.get_future()
        with torch.spyre.stream(other):
            value = fut.wait()
            later = value[0] + 1
            out["future.other_pending"] = other.query()
            gate.release()
            later = later.cpu().tolist()  # on `other`, where it was computed
    out["future"] = [type(fut).__name__, len(value), value[0].data_ptr() == t.data_ptr(), later]
    # A blocking collective's future, and then() on it (DDP comm hooks chain this way).
    t = torch.full((2,), float(r + 1), device="spyre")
    work = dist.all_reduce(t, async_op=True)
    chained = work.get_future().then(lambda f: f.value()[0] * 10)
    out["future.then"] = chained.wait().cpu().tolist()

# Direct: gloo works on the device memory only inside the collective's peer
# access window, an operation of the communication stream. Behind a gate there
# the collective has not started on either rank: the memory holds the inputs.
out["window.held"] = None
if os.environ["SPYRECCL_STAGING"] == "0":
    t = torch.full((2,), 10.0 * (r + 1), device="spyre")
    with Gate() as gate:
        gate.block(comm)
        work = dist.all_reduce(t, async_op=True)
        import time
        deadline = time.monotonic() + 30
        while gate.blocked_streams != 1 and time.monotonic() < deadline:
            time.sleep(0.001)  # the comm stream reaches the gate (its earlier work done)
        mode = torch.spyre._C._sanitizer_mode()
        torch.spyre._C._sanitizer_set_mode(0)  # a read racing the collective, on purpose
        with torch.spyre.stream(other):
            out["window.held"] = [work.is_completed(), t.cpu().tolist(), gate.blocked_streams]
        torch.spyre._C._sanitizer_set_mode(mode)
        gate.release()
    out["window.after"] = [work.wait(), t.cpu().tolist()]
    # A device-wide synchronize() while the collective waits for a late peer
    # waits for its window, which closes once the peer has joined and gloo is
    # done (nothing the peer's progress needs is held meanwhile): as on CUDA,
    # the result is there once it returns.
    store = dist.distributed_c10d._get_default_store()
    t = torch.full((2,), r + 1.0, device="spyre")
    if r == 0:
        work = dist.all_reduce(t, async_op=True)
        store.set("late_peer", "go")
        torch.spyre.synchronize()
        out["window.sync_with_late_peer"] = t.cpu().tolist()
        work.wait()
    else:
        store.wait(["late_peer"])
        dist.all_reduce(t)
        out["window.sync_with_late_peer"] = t.cpu().tolist()

# synchronize() covers every collective issued before it, staged or not (with
# SPYRECCL_STAGING=1; strided and PREMUL_SUM tensors stage by themselves; 17 MiB
# goes in pieces): rank 0's synchronize() starts while rank 1 has not joined
# yet, and returns once the result is in its tensor (the copies back are queued
# only once gloo is done, after the synchronize() started).
store = dist.distributed_c10d._get_default_store()
for case in ("contiguous", "strided", "premul_sum", "pieces", "all_gather", "broadcast"):
    numel = 17 * 2**20 // 4 if case == "pieces" else 2
    t = torch.full((numel, 2) if case == "strided" else (numel,), r + 1.0, device="spyre")
    t = t[:, 1] if case == "strided" else t
    op = dist._make_nccl_premul_sum(2.0) if case == "premul_sum" else R.SUM
    if r == 1:
        store.wait([f"sync_{case}"])
    if case == "all_gather":
        result = torch.zeros(4, device="spyre")
        work = dist.all_gather_into_tensor(result, t, async_op=True)
    elif case == "broadcast":
        result = t
        work = dist.broadcast(t, src=0, async_op=True)  # rank 1 receives
    else:
        result = t
        work = dist.all_reduce(t, op=op, async_op=True)
    if r == 0:
        store.set(f"sync_{case}", "go")
    torch.spyre.synchronize()
    out[f"sync.{case}"] = sorted(set(result.cpu().tolist()))
    work.wait()

# 4. wait(timeout) gives up, with a clear error, on a collective whose inputs
#    are held (rank 0's stream is gated; rank 1 waits inside gloo meanwhile);
#    once the gate opens, the collective completes on both ranks.
from datetime import timedelta
with torch.spyre.stream(s):
    t = torch.full((2,), float(r + 1), device="spyre")
    with Gate() as gate:
        if r == 0:
            gate.block(s)
        work = dist.all_reduce(t, async_op=True)
        out["timeout"] = error(lambda: work.wait(timedelta(milliseconds=300))) if r == 0 else None
        gate.release()
    out["after_timeout"] = [work.wait(), (t * 1).cpu().tolist()]

# 5. An input dropped while its collective is in flight (rank 0's stream is
#    gated, so rank 1's gloo waits for it): its memory is not handed out again
#    before gloo is done with it, and the result is right.
with torch.spyre.stream(s):
    gathered = torch.zeros(2048, device="spyre")
    x = torch.full((1024,), float(r + 1), device="spyre")
    with Gate() as gate:
        if r == 0:
            gate.block(s)
        work = dist.all_gather_into_tensor(gathered, x, async_op=True)
        address = x.data_ptr()
        del x
        fresh = torch.full((1024,), 99.0, device="spyre")
        out["dropped.reused"] = fresh.data_ptr() == address
        gate.release()
    work.wait()
    out["dropped.result"] = [gathered[:1024].cpu().unique().tolist(),
                             gathered[1024:].cpu().unique().tolist(), fresh.cpu().unique().tolist()]

# A collective from a second thread: same device, same group.
def in_thread():
    t = spyre([10.0 * (r + 1)])
    dist.all_reduce(t)
    box["thread_all_reduce"] = read(t)
worker = threading.Thread(target=in_thread)
worker.start(); worker.join()
out["thread_all_reduce"] = box["thread_all_reduce"]

objects = [{"from": r}]
dist.broadcast_object_list(objects, src=1)
out["broadcast_object_list"] = objects

out["all_to_all.spyre"] = error(
    lambda: dist.all_to_all([spyre([0.0]), spyre([0.0])], [spyre([1.0]), spyre([2.0])]))
out["broadcast.bad_root"] = error(lambda: dist.broadcast(spyre([1.0]), src=5))
# Bad input refused at the call, naming the value.
out["other_device"] = error(lambda: dist.all_reduce(torch.ones(1, device=f"spyre:{1 - r}")))
out["avg_int"] = error(lambda: dist.all_reduce(spyre([1, 2], torch.int64), op=R.AVG))
out["band_float"] = error(lambda: dist.all_reduce(spyre([1.0]), op=R.BAND, async_op=True))
# A collective that does not match across ranks (dtypes differ) fails on every
# rank: every wait() raises it, nothing is copied back, and the group still works.
t = spyre([r + 1, 7], torch.int64 if r == 0 else torch.int32)
work = dist.all_reduce(t, async_op=True)
first, second = error(work.wait), error(work.wait)
out["async_error"] = [first, second, work.is_completed(), work.is_success(),
                      work.exception() is not None, t.cpu().tolist()]
t = spyre([r + 1.0, 2.0 + r])
dist.all_reduce(t)
out["after_error"] = t.cpu().tolist()
# The same across a rank whose tensor is large enough to go in pieces and one
# whose tensor is not: both refuse it, nothing is copied back, the group works.
t = torch.full((17 * 2**20 // 4 if r == 0 else 2,), 1.0, device="spyre")
out["pieces_mismatch"] = [error(lambda: dist.all_reduce(t)), bool((t.cpu() == 1.0).all())]
t = spyre([r + 1.0, 2.0 + r])
dist.all_reduce(t)
out["after_pieces_mismatch"] = t.cpu().tolist()

dist.destroy_process_group()
save()
"""


# Both ways spyreccl hands spyre tensors to gloo (docs/distributed.md,
# "Streams"): host views of their memory (the default) and staged copies.
# The direct path's job is the distributed layer's one job in the inner tier.
@pytest.fixture(scope="module", params=["direct", pytest.param("staging", marks=pytest.mark.slow)])
def collectives(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"collectives-{request.param}")
    torchrun(tmp_path, COLLECTIVES, env={"SPYRECCL_STAGING": str(int(request.param == "staging"))})
    return [dict(res, mode=request.param) for res in rank_results(tmp_path)]


def both(results, key):
    return [res[key] for res in results]


def test_each_rank_binds_local_rank_in_every_thread(collectives):
    assert both(collectives, "binding") == [[0, "spyre:0", 0], [1, "spyre:1", 1]]
    assert both(collectives, "thread_binding") == [[0, "spyre:0", 0], [1, "spyre:1", 1]]
    # No device variables: visible devices follow LOCAL_WORLD_SIZE.
    assert both(collectives, "device_count") == [2, 2]


def test_default_process_group_uses_spyreccl_for_spyre_and_gloo_for_cpu(collectives):
    # get_backend(): "undefined", what was asked for (torch 2.13 stores the argument).
    expected = ["ProcessGroupSpyreCCL", "spyreccl", "spyre:spyreccl", "spyreccl", "gloo", ["cpu"],
                "undefined"]
    assert both(collectives, "backend") == [expected, expected]
    assert both(collectives, "all_reduce.cpu.sync") == [[["cpu", [3]]]] * 2
    assert both(collectives, "all_reduce.cpu.async") == [[["cpu", [3]]]] * 2
    # PREMUL_SUM is not in gloo: spyreccl scales a private copy, then sums.
    assert both(collectives, "all_reduce.cpu.PREMUL_SUM.sync") == [[["cpu", [5.0, 10.0]]]] * 2
    assert both(collectives, "all_reduce.cpu.PREMUL_SUM.async") == [[["cpu", [5.0, 10.0]]]] * 2
    assert both(collectives, "all_reduce.empty.async") == [[["spyre:0", []]], [["spyre:1", []]]]
    assert both(collectives, "broadcast_object_list") == [[{"from": 1}]] * 2
    assert both(collectives, "barrier") == [[True, None]] * 2


# Inputs: rank 0 [1, 4], rank 1 [2, 3] (ints: [1, 6], [2, 6]).
@pytest.mark.parametrize(
    "op,expected",
    [
        ("SUM", [3.0, 7.0]),
        ("PRODUCT", [2.0, 12.0]),
        ("MIN", [1.0, 3.0]),
        ("MAX", [2.0, 4.0]),
        ("AVG", [1.5, 3.5]),
        ("PREMUL_SUM", [5.0, 10.0]),  # 1 * [1, 4] + 2 * [2, 3]
        ("BAND", [0, 6]),
        ("BOR", [3, 6]),
        ("BXOR", [3, 0]),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_all_reduce_every_op(collectives, op, expected, mode):
    results = both(collectives, f"all_reduce.{op}.{mode}")
    assert results == [[["spyre:0", expected]], [["spyre:1", expected]]]


@pytest.mark.parametrize(
    "name,expected",
    [
        # src=1 sends [11, 11, 11].
        ("broadcast", [[["spyre:0", [11.0] * 3]], [["spyre:1", [11.0] * 3]]]),
        # dst=0 gets the sum; the other rank's tensor is left as it was.
        ("reduce", [[["spyre:0", [3.0, 30.0]]], [["spyre:1", [2.0, 20.0]]]]),
        ("reduce.MAX", [[["spyre:0", [1.0, 10.0]]], [["spyre:1", [2.0, 10.0]]]]),
        (
            "all_gather",
            [
                [["spyre:0", [0.0, 0.5]], ["spyre:0", [1.0, 1.5]], ["spyre:0", [0.0, 0.5]]],
                [["spyre:1", [0.0, 0.5]], ["spyre:1", [1.0, 1.5]], ["spyre:1", [1.0, 1.5]]],
            ],
        ),
        (
            "all_gather.cpu_outputs",
            [
                [["cpu", [0.0, 0.5]], ["cpu", [1.0, 1.5]], ["spyre:0", [0.0, 0.5]]],
                [["cpu", [0.0, 0.5]], ["cpu", [1.0, 1.5]], ["spyre:1", [1.0, 1.5]]],
            ],
        ),
        (
            "all_gather_into_tensor",
            [
                [["spyre:0", [0.0, 0.5, 1.0, 1.5]], ["spyre:0", [0.0, 0.5]]],
                [["spyre:1", [0.0, 0.5, 1.0, 1.5]], ["spyre:1", [1.0, 1.5]]],
            ],
        ),
        # [0, 1, 2, 3] + [1, 2, 3, 4] = [1, 3, 5, 7], scattered in halves.
        (
            "reduce_scatter_tensor",
            [
                [["spyre:0", [1.0, 3.0]], ["spyre:0", [0.0, 1.0, 2.0, 3.0]]],
                [["spyre:1", [5.0, 7.0]], ["spyre:1", [1.0, 2.0, 3.0, 4.0]]],
            ],
        ),
        # dst=1 gathers [1, 10] and [2, 20]; rank 0's outputs stay zero.
        (
            "gather",
            [
                [["spyre:0", [0.0, 0.0]], ["spyre:0", [0.0, 0.0]], ["spyre:0", [1.0, 10.0]]],
                [["spyre:1", [1.0, 10.0]], ["spyre:1", [2.0, 20.0]], ["spyre:1", [2.0, 20.0]]],
            ],
        ),
        # src=0 scatters its [5, 6] and [7, 8] (rank 1's list is only its own input).
        (
            "scatter",
            [
                [["spyre:0", [5.0, 6.0]], ["spyre:0", [5.0, 6.0]], ["spyre:0", [7.0, 8.0]]],
                [["spyre:1", [7.0, 8.0]], ["spyre:1", [5.0, 6.0]], ["spyre:1", [7.0, 8.0]]],
            ],
        ),
        # Rank r sends elements 2j, 2j+1 of [0, 1, 2, 3] + 10r to rank j.
        (
            "all_to_all_single",
            [
                [["spyre:0", [0.0, 1.0, 10.0, 11.0]], ["spyre:0", [0.0, 1.0, 2.0, 3.0]]],
                [["spyre:1", [2.0, 3.0, 12.0, 13.0]], ["spyre:1", [10.0, 11.0, 12.0, 13.0]]],
            ],
        ),
        (
            "reduce_scatter_tensor.MAX",
            [
                [["spyre:0", [0.0, 2.0]], ["spyre:0", [0.0, 1.0, 2.0, 3.0]]],
                [["spyre:1", [4.0, 6.0]], ["spyre:1", [0.0, 2.0, 4.0, 6.0]]],
            ],
        ),
    ],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_collective_results(collectives, name, expected, mode):
    assert both(collectives, f"{name}.{mode}") == expected


def test_large_all_reduce_in_pieces(collectives):
    assert both(collectives, "all_reduce.large.sync") == [True, True]
    assert both(collectives, "all_reduce.large.async") == [True, True]
    # Direct: gloo reduces the device memory in place, no host buffer. Staged:
    # one pinned buffer, from the host allocator's cache the second time.
    pinned = 0 if collectives[0]["mode"] == "direct" else 1
    assert both(collectives, "all_reduce.large.pinned_allocs") == [pinned, pinned]


def test_async_work_wait_is_idempotent(collectives):
    for key in [k for k in collectives[0] if k.endswith(".work")]:
        kind = "Work" if key == "all_reduce.cpu.work" else "SpyreCCLWork"
        assert both(collectives, key) == [[kind, True, True, True]] * 2, key


def test_collectives_follow_streams(collectives):
    for res in collectives:
        # Returned while the fill it reads was still held: the host did not wait.
        assert res["stream.returned_before_inputs"] == [False, False]
        assert res["stream.wait"] is True
        assert res["stream.result"] == [3.0, 3.0]  # the fills of both ranks, summed


def test_wait_makes_the_current_stream_wait_without_a_host_wait(collectives):
    for rank, res in enumerate(collectives):
        assert res["stream.wait_while_copy_back_held"] is True
        assert res["stream.s_pending"] is False  # s waits for the held comm stream
        if res["mode"] == "direct":
            # gloo wrote the sum in place before wait() returned.
            assert res["stream.other_stream_sees"] == [30.0, 30.0]
        else:
            # Another stream still sees this rank's input: the copy back has not run.
            assert res["stream.other_stream_sees"] == [10.0 * (rank + 1)] * 2
        assert res["stream.later"] == [60.0, 60.0]  # (10 + 20) * 2, after the comm stream


def test_direct_collectives_work_only_inside_their_window_on_the_comm_stream(collectives):
    if collectives[0]["mode"] != "direct":
        # Staged collectives have no window: gloo works on host twins.
        assert both(collectives, "window.held") == [None, None]
        return
    # Held behind a gate on the comm stream: gloo has not touched either rank's
    # tensor (the window that lets it has not opened), then the sum.
    for rank, res in enumerate(collectives):
        held = res["window.held"]
        assert held[0] is False
        assert held[1] == [10.0 * (rank + 1)] * 2
        assert held[2] == 1  # the comm stream is parked at the gate
        assert res["window.after"] == [True, [30.0, 30.0]]
        assert res["window.sync_with_late_peer"] == [3.0, 3.0]


def test_synchronize_covers_every_collective_issued_before_it(collectives):
    # Staged, the copies back used to be queued after synchronize() had returned: it
    # gave the inputs (1.0 / 2.0) on both ranks.
    for case, values in (("contiguous", [3.0]), ("strided", [3.0]), ("premul_sum", [6.0]),
                         ("pieces", [3.0]), ("all_gather", [1.0, 2.0]), ("broadcast", [1.0])):
        assert both(collectives, f"sync.{case}") == [values, values], case


def test_an_input_dropped_in_flight_is_not_reused_before_gloo_is_done(collectives):
    # Direct: gloo reads the memory itself, so the view keeps it. Staged: the
    # copy to the host is queued on the stream before the fill that reuses it
    # (stream order, as on CUDA).
    reused = collectives[0]["mode"] == "staging"
    assert both(collectives, "dropped.reused") == [reused, reused]
    assert both(collectives, "dropped.result") == [[[1.0], [2.0], [99.0]]] * 2


def test_spyreccl_staging_takes_0_or_1(monkeypatch):
    import torch_spyre.distributed as ccl

    monkeypatch.setenv("SPYRECCL_STAGING", "yes")
    with pytest.raises(ValueError, match="^SPYRECCL_STAGING must be 0 or 1, got 'yes'$"):
        ccl._staging_forced()
    monkeypatch.setenv("SPYRECCL_STAGING", "1")
    assert ccl._staging_forced() is True


def test_wait_with_a_timeout_gives_up_clearly(collectives):
    assert collectives[0]["timeout"] == [
        "RuntimeError",
        "spyreccl: allreduce did not complete within 0:00:00.300000 (a rank did not join the "
        "collective, or its inputs never became ready)",
    ]
    assert both(collectives, "after_timeout") == [[True, [3.0, 3.0]]] * 2


def test_get_future_completes_in_stream_order_with_the_outputs(collectives):
    for res in collectives:
        assert res["future.other_pending"] is False  # `other` waits for the held copy back
        assert res["future"] == ["Future", 1, True, [4.0, 4.0, 4.0]]  # (1 + 2) + 1
        assert res["future.then"] == [30.0, 30.0]


def test_collective_from_a_second_thread(collectives):
    assert both(collectives, "thread_all_reduce") == [["spyre:0", [30.0]], ["spyre:1", [30.0]]]


def test_errors_propagate(collectives):
    unsupported = [
        "NotImplementedError",
        "spyreccl: alltoall is not supported on spyre tensors (supported: all_reduce, broadcast, "
        "reduce, all_gather, all_gather_into_tensor, reduce_scatter_tensor, gather, scatter, "
        "all_to_all_single, all_gather_single_coalesced, reduce_scatter_single_coalesced, "
        "barrier); copy the tensors to the cpu first",
    ]
    assert both(collectives, "all_to_all.spyre") == [unsupported] * 2
    bad_root = ["RuntimeError", "ProcessGroupGloo::broadcast: invalid root rank: 5"]
    assert both(collectives, "broadcast.bad_root") == [bad_root] * 2
    for rank, res in enumerate(collectives):
        assert res["other_device"] == [
            "RuntimeError",
            f"Only one Spyre device per process is supported: this process is bound to "
            f"spyre:{rank} but spyre:{1 - rank} was requested (run one process per device, e.g. "
            "with torchrun)",
        ]
    assert both(collectives, "avg_int") == [[
        "ValueError",
        "spyreccl: ReduceOp.AVG needs a floating point tensor, got torch.int64; use "
        "ReduceOp.SUM and divide",
    ]] * 2
    assert both(collectives, "band_float") == [[
        "ValueError", "spyreccl: ReduceOp.BAND needs an integer or bool tensor, got torch.float32"
    ]] * 2
    mismatch = [
        "RuntimeError",
        "spyreccl: allreduce does not match across ranks (rank 0: allreduce(SUM, torch.int64 "
        "[2]); rank 1: allreduce(SUM, torch.int32 [2])): every rank must call the same "
        "collective with the same dtypes and shapes",
    ]
    assert both(collectives, "async_error") == [
        [mismatch, mismatch, True, False, True, [1, 7]],
        [mismatch, mismatch, True, False, True, [2, 7]],
    ]
    assert both(collectives, "after_error") == [[3.0, 5.0]] * 2
    mismatch = [
        "RuntimeError",
        "spyreccl: allreduce does not match across ranks (rank 0: allreduce(SUM, torch.float32 "
        "[4456448]); rank 1: allreduce(SUM, torch.float32 [2])): every rank must call the same "
        "collective with the same dtypes and shapes",
    ]
    assert both(collectives, "pieces_mismatch") == [[mismatch, True]] * 2
    assert both(collectives, "after_pieces_mismatch") == [[3.0, 5.0]] * 2


# ---------------------------------------------------------------- explicit backend strings


@pytest.mark.slow  # a torchrun job
def test_explicit_backend_string_device_id_and_subgroup(tmp_path):
    torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            """
        dist.init_process_group("cpu:gloo,spyre:spyreccl",
                                device_id=torch.device("spyre", LOCAL_RANK))
        r = dist.get_rank()
        out["backend"] = [type(dist.group.WORLD).__name__, dist.get_backend(),
                          dist.get_backend_config()]
        t, c = torch.tensor([r + 1.0], device="spyre"), torch.tensor([r + 1.0])
        dist.all_reduce(t); dist.all_reduce(c)
        out["world"] = [str(t.device), t.cpu().tolist(), c.tolist()]
        sub = dist.new_group(backend="spyreccl")
        t = torch.tensor([10.0 * (r + 1)], device="spyre")
        dist.all_reduce(t, group=sub)
        out["subgroup"] = [type(sub).__name__, dist.get_backend(sub), t.cpu().tolist()]
        dist.barrier(device_ids=[LOCAL_RANK])
        dist.destroy_process_group()
        save()
        """
        ),
    )
    results = rank_results(tmp_path)
    config = "cpu:gloo,spyre:spyreccl"
    assert both(results, "backend") == [["ProcessGroupSpyreCCL", config, config]] * 2
    assert both(results, "world") == [["spyre:0", [3.0], [3.0]], ["spyre:1", [3.0], [3.0]]]
    assert both(results, "subgroup") == [["ProcessGroupSpyreCCL", "spyreccl", [30.0]]] * 2


@pytest.mark.slow  # a torchrun job
def test_get_backend_names_spyreccl_when_asked_for_by_name(tmp_path):
    # get_backend() returns the string given to init_process_group (torch 2.13
    # keeps it in _world.pg_map): "spyreccl" here, "undefined" for no backend
    # (as for cuda/nccl); get_backend_config() and the group's name() always
    # name spyreccl (docs/distributed.md).
    torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            """
        dist.init_process_group("spyreccl")
        r = dist.get_rank()
        t, c = torch.tensor([r + 1.0], device="spyre"), torch.tensor([r + 1.0])
        dist.all_reduce(t); dist.all_reduce(c)
        out["backend"] = [dist.get_backend(), dist.get_backend_config(),
                          dist.group.WORLD.name(), t.cpu().tolist(), c.tolist()]
        dist.destroy_process_group()
        save()
        """
        ),
    )
    assert both(rank_results(tmp_path), "backend") == [
        ["spyreccl", "spyre:spyreccl", "spyreccl", [3.0], [3.0]]
    ] * 2


# ---------------------------------------------------------------- demo and failure


@pytest.mark.slow  # a torchrun job
def test_torchrun_demo(tmp_path):
    proc = torchrun(tmp_path, (ROOT / "examples" / "torchrun_demo.py").read_text())
    losses = {0: [], 1: []}
    checksums = {}
    pattern = re.compile(r"rank (\d)/2 on spyre:(\d): (?:step (\d) loss (\S+)|parameter checksum (\S+))$")
    for line in proc.stdout.splitlines():
        m = pattern.match(line)
        assert m, line
        rank = int(m[1])
        assert int(m[2]) == rank  # rank r trains on spyre:r
        if m[3]:
            assert int(m[3]) == len(losses[rank]) + 1  # steps in order
            losses[rank].append(float(m[4]))
        else:
            checksums[rank] = m[5]
    for rank in range(NPROC):
        assert len(losses[rank]) == 5
        assert losses[rank] == sorted(losses[rank], reverse=True)  # it trains: the loss falls
    # DDP kept the replicas identical: the same checksum, to the last digit printed.
    assert len(checksums) == 2 and checksums[0] == checksums[1], checksums
    assert losses[0] != losses[1]  # yet each rank saw its own data


@pytest.mark.slow  # a torchrun job
def test_local_rank_beyond_the_visible_devices_fails_clearly(tmp_path):
    proc = torchrun(
        tmp_path,
        """
        import os, torch
        x = torch.ones(1, device="spyre")
        print(f"rank {os.environ['LOCAL_RANK']} on {x.device}", flush=True)
        """,
        env={"SPYRE_DEVICES": "0"},  # one visible device for two ranks
        check=False,
    )
    assert proc.returncode != 0
    assert (
        "RuntimeError: Invalid device index 1: out of range for 1 visible Spyre device(s)"
        in proc.stderr
    )
    assert "local_rank: 1" in proc.stderr  # torchrun names the failing worker


# ---------------------------------------------------------------- a late peer

PG_TIMEOUT = 30  # seconds

LATE = 3.0  # how long rank 1 is late at most, in seconds

PROMPT = 1.0  # bound on rank 0's second async call, in seconds (well below LATE)


@pytest.mark.slow
def test_async_all_reduce_returns_while_a_peer_is_late(tmp_path):
    # Rank 1 joins each round only once rank 0's two async calls returned (a
    # store key rank 0 sets), or LATE seconds after it started waiting. Rank 0
    # makes its second call once its progress thread waits in the exchange
    # of the first (for rank 1). Round 0: small tensors; round 1: 17 MiB (a
    # pipelined all_reduce: exchange and staging waits).
    torchrun(
        tmp_path,
        PRELUDE
        + f"""
import time
from datetime import timedelta
dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
r = dist.get_rank()
store = dist.distributed_c10d._get_default_store()
import torch_spyre.distributed.consistency as consistency
in_exchange = threading.Event()
rows = consistency._Exchange.rows

def rows_telling(self):
    in_exchange.set()  # the progress thread is about to wait for the peers
    return rows(self)

consistency._Exchange.rows = rows_telling
for round, numel in enumerate([4, 17 * 2**20 // 4]):
    in_exchange.clear()
    a = torch.full((numel,), r + 1.0, device="spyre")
    b = torch.full((numel,), 10.0 * (r + 1), device="spyre")
    if r == 1:
        start = time.monotonic()
        try:
            store.wait([f"called{{round}}"], timedelta(seconds={LATE}))
            out[f"late{{round}}"] = "released"
        except dist.DistStoreError:
            out[f"late{{round}}"] = "timed out"
        wa = dist.all_reduce(a, async_op=True)
        wb = dist.all_reduce(b, async_op=True)
    else:
        wa = dist.all_reduce(a, async_op=True)
        out[f"in_exchange{{round}}"] = in_exchange.wait({PG_TIMEOUT})
        start = time.monotonic()
        wb = dist.all_reduce(b, async_op=True)
        out[f"second_call{{round}}"] = time.monotonic() - start
        store.set(f"called{{round}}", "1")
    wa.wait()
    wb.wait()
    out[f"a{{round}}"] = torch.unique(a.cpu()).tolist()
    out[f"b{{round}}"] = torch.unique(b.cpu()).tolist()
dist.destroy_process_group()
save()
""",
        timeout=PG_TIMEOUT + 90,
    )
    rank0, rank1 = rank_results(tmp_path)
    for round in (0, 1):
        assert rank0[f"in_exchange{round}"] is True
        assert rank0[f"second_call{round}"] < PROMPT, rank0
        # Rank 0's calls returned before rank 1 gave up waiting for them.
        assert rank1[f"late{round}"] == "released"
        for res in (rank0, rank1):
            assert res[f"a{round}"] == [3.0]
            assert res[f"b{round}"] == [30.0]


# ---------------------------------------------------------------- strided tensors


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


@pytest.mark.slow  # a torchrun job
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
