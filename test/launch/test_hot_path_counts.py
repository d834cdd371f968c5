"""Issue 52 item 3: a small op costs what CPU's does, plus one enqueue. Counted, not
timed: benchmarks/hot_path_counts.py runs `y = x + 1` in a fresh process with an
LD_PRELOAD counter (allocations, lock acquisitions, GIL acquisitions, per thread) and
reports per-op counts for spyre (a side stream) and CPU eager; spyre's ops are
queued behind gates in chunks, so no count depends on how fast the engine runs."""

import os
import shutil
import sys

import pytest

from _helpers import ROOT, WAIT_UNTIL

sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import hot_path_counts  # noqa: E402
from conftest import run_python  # noqa: E402

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                       reason="the counter is compiled with the system C compiler"),
]

# Counts over N ops (after a warm-up), divided by N: a per-chunk cost (the gate,
# its release and wait) adds at most a few hundredths.
N = 2560
SLACK = 0.1


@pytest.fixture(scope="module")
def counts():
    return hot_path_counts.run(n=N, warmup=512)


def test_gil_acquisitions_per_op_equal_cpu_eagers(counts):
    # The boxed fallback's stack copied the Python-owned `x`: its second reference
    # took the GIL when made and when dropped. The hot ops' kernels borrow it.
    assert counts["spyre"]["host"]["gil"] == pytest.approx(counts["cpu"]["host"]["gil"], abs=SLACK)
    assert counts["spyre"]["engine"]["gil"] == 0


def test_host_locks_per_op_at_most_cpu_eagers_plus_one(counts):
    # CPU eager's are the GIL's (three per acquisition and release). Spyre's one
    # more: the stream's enqueue. The previous result's free takes no lock (a block
    # used on its allocation stream only) and leaves the block in the allocator's
    # reuse slot, where the result's malloc takes it back without the lock; nor
    # does recordStream take it (x was allocated on this stream).
    assert counts["spyre"]["host"]["locks"] <= counts["cpu"]["host"]["locks"] + 1 + SLACK


def test_waiting_for_an_idle_stream_costs_what_asking_it_does(counts):
    # torch.Stream.synchronize's binding released the GIL around every call; an
    # idle stream's wait now releases nothing, as query() does not.
    sync, query = counts["idle_sync"]["host"], counts["idle_query"]["host"]
    assert query["gil"] <= SLACK
    for kind in ("gil", "locks", "mallocs", "futex_waits", "cond_waits"):
        assert sync[kind] <= query[kind] + SLACK, kind


def test_engine_mallocs_per_op_at_most_two(counts):
    # Pooled ops, the engine's CPU aliases re-pointed, the scalar converted at
    # the launch: the engine allocates nothing for this op.
    assert counts["spyre"]["engine"]["mallocs"] <= 2
    assert counts["spyre"]["engine"]["mallocs"] <= SLACK


def test_no_per_op_work_object_or_closure_allocation_on_the_host(counts):
    # A make_shared'd op and a heap std::function per launch would be two more
    # mallocs than CPU's: spyre's host allocates no more than CPU eager's, whose
    # count includes the result's TensorImpl, StorageImpl and data.
    assert counts["spyre"]["host"]["mallocs"] <= counts["cpu"]["host"]["mallocs"] + SLACK


def test_the_counter_sees_each_kind_it_counts(counts):
    # CPU eager's `x + 1` allocates its result and releases the GIL around the
    # kernel: a counter that saw nothing would pass every ceiling above.
    assert counts["cpu"]["host"]["mallocs"] >= 3
    assert counts["cpu"]["host"]["gil"] >= 1
    assert counts["cpu"]["host"]["locks"] >= 1
    assert counts["cpu"]["engine"]["mallocs"] <= SLACK  # no other thread works for CPU eager


def test_ops_a_failed_stream_drops_unrun_go_back_to_the_host():
    # A pooled op is given back by its closure once it ran, or by the stub's
    # on_discard when its stream fails first: none is lost (test_compute.py's
    # freed-by-the-host test counts those that ran).
    proc = run_python(WAIT_UNTIL + """
import torch, torch_spyre
from torch_spyre.testing import Gate, inject_fault
retired = torch_spyre._C._retired_work
s = torch.spyre.Stream()
with s:
    y = torch.zeros(16, device="spyre")
    y + 1  # the plan's first call, run at the call
s.synchronize()
gate = Gate()
with s:
    gate.block()
    wait_until(lambda: gate.blocked_streams == 1, what="the stream at the gate")
    inject_fault(s, "injected: the ops behind it are dropped")
    for _ in range(5):
        y + 1  # the first launch gives back what ran before
    assert retired() == 0, retired()
gate.release()
try:
    s.synchronize()
except RuntimeError as e:
    print(e)
print(retired())
""")
    assert proc.stdout.splitlines() == ["injected: the ops behind it are dropped", "5"], proc.stdout
