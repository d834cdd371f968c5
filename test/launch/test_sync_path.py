"""The synchronous path (csrc/launch/sync_path.h): ops computed on the host at the
call write their results into device blocks in stream order, never ahead of
work already queued on those blocks (issue 31, items 1 and 3)."""

import re
import threading
import time
import warnings

import pytest
import torch

import torch_spyre  # noqa: F401
from torch_spyre import _C
from torch_spyre.testing import Gate

from conftest import load_factor, run_python

WAIT_S = 30  # bound of every wait in this file, on an idle machine (times the load factor)


def wait_until(condition, what):
    seconds = WAIT_S * load_factor()
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:g} s waiting for {what}")
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


# ---- out= arguments follow ATen's rules (issue 49, item 9): the kernel gets a
# host tensor of the out's sizes and strides (resized only when the sizes
# differ), and one sharing an input's storage shares its host copy (overlap
# checks); values, layouts and errors are CPU's.

X = [0.1, 0.9, 0.7, 0.2, 0.8, 0.95, 0.3, 0.6, 0.55, 0.4]


def _masked_select(x, out):
    return torch.masked_select(x, x > 0.5, out=out)


def _nonzero(x, out):
    return torch.nonzero(x.view(2, 5) > 0.5, out=out)


def _randperm(x, out):
    torch.manual_seed(3)
    return torch.randperm(out.numel(), out=out)


def _multinomial(x, out):
    torch.manual_seed(3)
    return torch.multinomial(x, out.numel(), True, out=out)


def _bernoulli(x, out):
    torch.manual_seed(3)
    return torch.bernoulli(x[: out.numel()], out=out)


def _normal(x, out):
    torch.manual_seed(3)
    return torch.normal(0.0, 1.0, tuple(out.shape), out=out)


def _randint(x, out):
    torch.manual_seed(3)
    return torch.randint(10, tuple(out.shape), out=out)


# (op, out dtype, base shape, how the out is cut from the base)
OUT_CASES = [
    ("masked_select-strided", _masked_select, torch.float32, (12,), lambda b: b[::2]),  # exact size: 6
    ("masked_select-grows", _masked_select, torch.float32, (12,), lambda b: b[::2][:4]),
    ("masked_select-offset", _masked_select, torch.float32, (9,), lambda b: b[3:]),
    ("nonzero-row-major", _nonzero, torch.long, (6, 2), lambda b: b),
    ("nonzero-transposed", _nonzero, torch.long, (2, 6), lambda b: b.t()),
    ("nonzero-strided", _nonzero, torch.long, (6, 4), lambda b: b[:, ::2]),
    ("randperm-strided", _randperm, torch.long, (10,), lambda b: b[::2]),
    ("randperm-transposed", _randperm, torch.long, (3, 4), lambda b: b.t()),
    ("multinomial-strided", _multinomial, torch.long, (10,), lambda b: b[1::2]),
    ("bernoulli-strided", _bernoulli, torch.float32, (10,), lambda b: b[::2]),
    ("bernoulli-transposed", _bernoulli, torch.float32, (2, 3), lambda b: b.t()),
    ("normal-transposed", _normal, torch.float32, (3, 4), lambda b: b.t()),
    ("randint-strided", _randint, torch.long, (4, 6), lambda b: b[1:, ::3]),
]


@pytest.mark.parametrize("name,op,dtype,shape,cut", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_out_arguments_keep_atens_out_rules(name, op, dtype, shape, cut):
    cpu_base = torch.full(shape, -1, dtype=dtype)
    base = cpu_base.to("spyre")
    cpu_x = torch.tensor(X)
    if name.startswith("bernoulli"):
        cpu_x = torch.full((10,), 0.5)
    with warnings.catch_warnings(record=True) as cpu_warned:
        warnings.simplefilter("always")
        cpu_out = cut(cpu_base)
        expected = op(cpu_x, cpu_out)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        out = cut(base)
        returned = op(cpu_x.to("spyre"), out)
    assert returned is out
    assert (out.shape, out.stride(), out.storage_offset()) == (
        cpu_out.shape, cpu_out.stride(), cpu_out.storage_offset())
    assert torch.equal(out.cpu(), expected)
    assert torch.equal(base.cpu(), cpu_base)  # nothing written outside the view
    assert [str(w.message) for w in warned] == [str(w.message) for w in cpu_warned]


def test_an_out_argument_overlapping_an_input_is_refused_as_on_cpu():
    message = ("unsupported operation: some elements of the input tensor and the written-to tensor "
               "refer to a single memory location. Please clone() the tensor before performing the "
               "operation.")
    for cut in (lambda x: x, lambda x: x[:6], lambda x: x[4:]):
        cpu_x = torch.tensor(X)
        with pytest.raises(RuntimeError, match=re.escape(message)):
            torch.masked_select(cpu_x, cpu_x > 0.5, out=cut(cpu_x))
        x = cpu_x.to("spyre")
        with pytest.raises(RuntimeError, match=re.escape(message)):
            torch.masked_select(x, x > 0.5, out=cut(x))
        assert x.cpu().tolist() == cpu_x.tolist()
    # An out that overlaps itself (an expanded view) too.
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.randperm(4, out=torch.zeros(1, dtype=torch.long, device="spyre").expand(4))
    torch.spyre.synchronize()


def test_a_synchronous_out_write_is_named_after_the_op_by_the_sanitizer(own_sanitizer_mode):
    from torch_spyre import sanitizer
    from torch_spyre.sanitizer import UnsynchronizedAccessError

    x = torch.tensor(X, device="spyre")
    out = torch.zeros(6, device="spyre")
    torch.spyre.synchronize()
    sanitizer.enable()
    try:
        s = torch.spyre.Stream()
        with s:
            torch.masked_select(x, x > 0.5, out=out)
        with pytest.raises(UnsynchronizedAccessError) as error:
            out + 1
        assert str(error.value).splitlines()[2].startswith(
            "  earlier access: aten::masked_select.out writes tensor float32[6]")
        with s:
            fresh = torch.masked_select(x, x > 0.5)
        with pytest.raises(UnsynchronizedAccessError) as error:
            fresh + 1
        assert str(error.value).splitlines()[2].startswith(
            "  earlier access: aten::masked_select writes tensor float32[6]")
    finally:
        sanitizer.disable()
        torch.spyre.synchronize()


def test_out_arguments_on_two_threads_and_under_the_card_rules():
    code = """
        import threading, torch, torch_spyre
        x = torch.tensor([0.1, 0.9, 0.7, 0.2, 0.8, 0.95, 0.3, 0.6], device="spyre")
        results = {}

        def run(k):
            o = torch.full((5, 4), -1, dtype=torch.long, device="spyre")
            torch.nonzero(x.view(2, 4) > 0.5, out=o[:, ::2])
            buf = torch.full((10,), -1.0, device="spyre")
            torch.masked_select(x, x > 0.5, out=buf[::2])
            results[k] = (o.cpu().tolist(), buf.cpu().tolist())

        threads = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        print(torch.spyre.card_rules(), results[0] == results[1])
        print(results[0])
        try:
            torch.masked_select(x, x > 2, out=x)
        except RuntimeError as e:
            print(str(e)[:64])
        torch.spyre.synchronize()
        print(torch.equal(x.cpu(), torch.tensor([0.1, 0.9, 0.7, 0.2, 0.8, 0.95, 0.3, 0.6])))
    """
    expected = [
        "True",
        "([[0, -1, 1, -1], [0, -1, 2, -1], [1, -1, 0, -1], [1, -1, 1, -1], [1, -1, 3, -1]], "
        "[0.8999999761581421, -1.0, 0.699999988079071, -1.0, 0.800000011920929, -1.0, "
        "0.949999988079071, -1.0, 0.6000000238418579, -1.0])",
        "unsupported operation: some elements of the input tensor and the",
        "True",
    ]
    for env, card in (({}, "False"), ({"TORCH_SPYRE_CARD_RULES": "1"}, "True")):
        proc = run_python(code, env=env)
        assert proc.stdout.splitlines() == [f"{card} True"] + expected[1:]


@pytest.fixture(scope="module")
def out_only_ops():
    """Custom ops (the synchronous path runs them) whose out= arguments no return stands for."""
    lib = torch.library.Library("spyre_test_outs", "DEF")
    lib.define("twice(Tensor x, *, Tensor(a!) out) -> ()")
    lib.define("parts(Tensor x, *, Tensor(a!)[] out) -> ()")

    def twice(x, *, out):
        out.copy_(x * 2)

    def parts(x, *, out):
        for k, o in enumerate(out):
            o.copy_(x + k)

    lib.impl("twice", twice, "CPU")
    lib.impl("parts", parts, "CPU")
    yield torch.ops.spyre_test_outs
    lib._destroy()


def test_out_arguments_no_return_stands_for_are_written_back(out_only_ops):
    results = []
    for device in ("cpu", "spyre"):
        x = torch.arange(3.0).to(device)
        o = torch.full((6,), -1.0, device=device)
        out_only_ops.twice(x, out=o[::2])
        parts = [torch.full((3,), -1.0, device=device), torch.full((6,), -1.0, device=device)]
        out_only_ops.parts(x, out=[parts[0], parts[1][1::2]])
        results.append((o.cpu().tolist(), [p.cpu().tolist() for p in parts]))
    assert results[1] == results[0] == (
        [0.0, -1.0, 2.0, -1.0, 4.0, -1.0],
        [[0.0, 1.0, 2.0], [-1.0, 1.0, -1.0, 2.0, -1.0, 3.0]])


def test_empty_out_arguments_share_no_host_memory():
    # Two empty outs have no device memory (a null address): each gets a host
    # tensor of its own, or the second result lands on the first.
    results = []
    for device in ("cpu", "spyre"):
        x = torch.tensor([0.1, 0.9, 0.7, 0.2]).to(device)
        hist, edges = torch.empty(0, device=device), torch.empty(0, device=device)
        torch.histogram(x, 2, out=(hist, edges))
        results.append((hist.cpu(), edges.cpu()))
    assert torch.equal(results[1][0], results[0][0]) and torch.equal(results[1][1], results[0][1])
    assert results[1][0].tolist() == [2.0, 2.0]
