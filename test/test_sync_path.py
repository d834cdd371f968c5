"""The synchronous path (csrc/aten/sync_path.h): ops computed on the host at the
call write their results into device blocks in stream order, never ahead of
work already queued on those blocks (issue 31, items 1 and 3)."""

import threading
import time

import pytest
import torch

import torch_spyre  # noqa: F401
from torch_spyre import _C
from torch_spyre.testing import Gate

WAIT_S = 30  # bound of every wait in this file


def wait_until(condition, what):
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {WAIT_S} s waiting for {what}")
        time.sleep(0.001)


def test_growing_an_out_argument_keeps_no_stale_bytes():
    # nonzero(x, out=o) grows o from 1 to 12 int64: the old -7 must not land
    # on top of the result (the growth's copy is queued, the result too).
    cpu_x = torch.tensor([[0.0, 1.0, 2.0], [3.0, 0.0, 4.0], [5.0, 6.0, 0.0]])
    x = cpu_x.to("spyre")
    o = torch.full((1, 1), -7, dtype=torch.long, device="spyre")
    expected = torch.nonzero(cpu_x, out=torch.full((1, 1), -7, dtype=torch.long))
    returned = torch.nonzero(x, out=o)
    assert returned is o
    assert o.shape == (6, 2)
    assert torch.equal(o.cpu(), expected)
    assert o.cpu().tolist() == [[0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1]]


def test_growing_an_out_argument_of_masked_select_keeps_no_stale_bytes():
    cpu_x = torch.arange(8, dtype=torch.float32)
    mask = cpu_x.remainder(3) != 1
    o = torch.full((1,), -7.0, device="spyre")
    torch.masked_select(cpu_x.to("spyre"), mask.to("spyre"), out=o)
    assert o.cpu().tolist() == [0.0, 2.0, 3.0, 5.0, 6.0]


def test_out_argument_behind_queued_work_on_its_block():
    # The out= tensor is written by queued work (a fill behind a gate) before
    # the sync op runs: the result lands after that fill, not under it.
    cpu_x = torch.tensor([0, 3, 0, 5])
    x = cpu_x.to("spyre")
    o = torch.empty(2, 1, dtype=torch.long, device="spyre")
    with Gate() as gate:
        gate.block()
        o.fill_(-7)
        thread_result = {}

        def worker():
            try:
                thread_result["value"] = torch.nonzero(x, out=o)
            except BaseException as e:  # noqa: B902 - reported below
                thread_result["error"] = e

        t = threading.Thread(target=worker)
        t.start()
        wait_until(lambda: _C._threads_in_host_waits() >= 1, "the sync path to wait")
        gate.release()
        t.join(WAIT_S)
        assert not t.is_alive()
    assert "error" not in thread_result, thread_result.get("error")
    assert o.cpu().tolist() == [[1], [3]]


# 1.5 M results of 8 bytes: 12 MB blocks, which the caching allocator gives
# their own segment, so the freed filler block is the best fit for the result.
N = 1_500_000


@pytest.mark.parametrize("op", ["nonzero", "masked_select", "bool_index"])
def test_result_block_reused_from_queued_work_is_written_after_it(op):
    # Issue 31 item 3. A second thread's sync op waits for the default stream
    # (gated). The gate opens; this thread queues a 100 ms sleep, then makes a
    # tensor of the result's size filled with 7 (the fill queued behind the
    # sleep) and frees it: its block is handed to the sync op's result. The
    # result must still be the op's, as on CPU.
    torch.spyre.synchronize()
    torch.spyre.empty_cache()  # no other free block of the result's size
    if op == "nonzero":
        cpu_x = torch.ones(N, dtype=torch.int8)
        x = cpu_x.to("spyre")
        run = torch.nonzero
        expected = torch.nonzero(cpu_x)
    else:
        cpu_x = torch.arange(2 * N, dtype=torch.float32)[::2].contiguous()
        cpu_mask = torch.ones(N, dtype=torch.bool)
        x, mask = cpu_x.to("spyre"), cpu_mask.to("spyre")
        if op == "masked_select":
            run = lambda t: torch.masked_select(t, mask)  # noqa: E731
            expected = torch.masked_select(cpu_x, cpu_mask)
        else:
            run = lambda t: t[mask]  # noqa: E731
            expected = cpu_x[cpu_mask]
    torch.spyre.synchronize()
    result = {}

    def worker():
        try:
            out = run(x)
            torch.spyre.synchronize()
            result["value"] = out
        except BaseException as e:  # noqa: B902 - reported below
            result["error"] = e

    gate = Gate()
    try:
        gate.block()
        t = threading.Thread(target=worker)
        t.start()
        wait_until(lambda: _C._threads_in_host_waits() >= 1, "the sync op to wait for the stream")
    finally:
        gate.release()
    torch.spyre._sleep(100)
    filler = torch.full(expected.shape, 7, dtype=expected.dtype, device="spyre")
    del filler
    t.join(WAIT_S)
    assert not t.is_alive(), "the sync op did not return"
    assert "error" not in result, result.get("error")
    torch.spyre.synchronize()
    assert torch.equal(result["value"].cpu(), expected)


def test_sync_op_result_is_queued_not_waited_for():
    # The op copies its argument to the host on the stream, waits for it,
    # computes on the host, and queues the write of its result: two operations.
    x = torch.tensor([0, 1, 0, 1], device="spyre")
    torch.spyre.synchronize()
    from torch_spyre.testing import launched_ops

    before = launched_ops()
    r = torch.nonzero(x)
    assert launched_ops() == before + 2  # the argument's copy, and the result's, queued
    assert r.cpu().tolist() == [[1], [3]]
