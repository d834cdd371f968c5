"""Issue 33, item 2 (host side): the stream sanitizer reports a CPU operation (or numpy(),
tolist(), item()) that reads the pinned destination of a pending non_blocking D2H, or writes the
pinned source of a pending non_blocking H2D, before the host waited for the copy. Deterministic:
decided by what the host waited for, not by whether the engine happened to run the copy."""

import inspect
import textwrap

import pytest
import torch

import torch_spyre  # noqa: F401
from _helpers import WAIT_UNTIL, wait_until
from conftest import run_python
from torch_spyre import _C, sanitizer
from torch_spyre.sanitizer import UnsynchronizedAccessError
from torch_spyre.testing import Gate, completed_ops, launched_ops

N = 1024  # float32 elements: 4096 bytes


pytestmark = pytest.mark.usefixtures("own_sanitizer_mode")


@pytest.fixture
def on():
    """Raise mode for the test, starting from a device the host knows is idle."""
    torch.spyre.synchronize()
    sanitizer.enable()


def line_after():
    """The caller's next line number (the access under test)."""
    return inspect.currentframe().f_back.f_lineno + 1


def span(t, count=None):
    """The report's overlap text for the first `count` elements of `t`."""
    nbytes = (t.numel() if count is None else count) * t.element_size()
    return f"  overlapping bytes: [{hex(t.data_ptr())}, {hex(t.data_ptr() + nbytes)}) ({nbytes} bytes)"


def lines(error):
    return str(error.value).splitlines()


DEFAULT = "torch.spyre.Stream(device=spyre:0, id=0, priority=0)"  # as reports name the default stream


def fix(stream_id):
    """The report's fix line for a copy on stream `stream_id` (the default stream by its call)."""
    stream = ("torch.spyre.default_stream()" if stream_id == 0 else
              f"<torch.spyre.Stream(device=spyre:0, id={stream_id}, priority=0)>")
    return (f"  fix: the host must wait for the copy before this access: {stream}.synchronize() (or "
            "an Event recorded on it after the copy and that event's synchronize(), or "
            "torch.spyre.synchronize())")


def pending_d2h(values=1.0):
    """A pinned host tensor that a non_blocking D2H on the current stream is writing."""
    x = torch.full((N,), values, device="spyre")
    return x.to("cpu", non_blocking=True)


def test_a_cpu_op_reading_a_pending_d2h_destination_is_reported(on):
    x = torch.full((N,), 2.0, device="spyre")
    copy_line = line_after()
    h = x.to("cpu", non_blocking=True)
    assert h.is_pinned()
    with pytest.raises(UnsynchronizedAccessError) as error:
        read_line = line_after()
        h + 1
    name = "test_a_cpu_op_reading_a_pending_d2h_destination_is_reported"
    text = lines(error)
    assert text[:5] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        f"  this access:    aten::add.Tensor reads host tensor float32[{N}] on the host",
        f"  earlier access: D2H writes host tensor float32[{N}] on {DEFAULT}, not ordered before it",
        span(h),
        "  earlier access launched at:",
    ]
    where = text.index("  this access launched at:")  # the innermost user frame last
    assert text[where - 1] == f"    {__file__}:{copy_line} in {name}"
    assert text[-2:] == [f"    {__file__}:{read_line} in {name}", fix(0)]
    torch.spyre.current_stream().synchronize()
    assert (h + 1).tolist() == [3.0] * N  # the host waited: quiet


@pytest.mark.parametrize("read, name", [
    (lambda h: h.numpy(), "numpy()"),
    (lambda h: h.tolist(), "tolist()"),
    (lambda h: h[5].item(), "aten::item"),
    (lambda h: h.sum(), "aten::sum"),
    (lambda h: print(h), None),  # the ops torch's printing runs on the elements
    (lambda h: torch.mul(h, 2, out=torch.empty(N)), "aten::mul.out"),
])
def test_every_host_read_is_reported(on, read, name):
    h = pending_d2h()
    with pytest.raises(UnsynchronizedAccessError) as error:
        read(h)
    what = "float32[]" if name == "aten::item" else f"float32[{N}]"
    if name is None:
        assert lines(error)[1].endswith(" on the host")
    else:
        assert lines(error)[1] == f"  this access:    {name} reads host tensor {what} on the host"


def test_a_view_of_the_destination_is_reported_for_its_own_bytes(on):
    h = pending_d2h()
    v = h[10:20]  # a view is not an access
    torch.empty_like(h)  # nor is reading a tensor's shape
    with pytest.raises(UnsynchronizedAccessError) as error:
        v * 2
    assert lines(error)[1:4] == [
        "  this access:    aten::mul.Tensor reads host tensor float32[10] on the host",
        f"  earlier access: D2H writes host tensor float32[{N}] on {DEFAULT}, not ordered before it",
        span(v),
    ]


def test_writing_a_pending_d2h_destination_is_write_after_write(on):
    h = pending_d2h()
    with pytest.raises(UnsynchronizedAccessError) as error:
        h.fill_(0)
    assert lines(error)[:2] == ["spyre sanitizer: unsynchronized access (write-after-write)",
                                f"  this access:    aten::fill_.Scalar writes host tensor float32[{N}] on the host"]


def event_synchronize(s):
    e = torch.spyre.Event()
    e.record(s)
    e.synchronize()


def wait_for_query(s):
    wait_until(s.query, what="the stream")  # a query that answered True: the host knows


HOST_WAITS = {
    "device_synchronize": lambda s: torch.spyre.synchronize(),
    "stream_synchronize": lambda s: s.synchronize(),
    "current_stream_synchronize": lambda s: torch.spyre.current_stream().synchronize(),
    "event_synchronize": event_synchronize,
    "stream_query": wait_for_query,
    "accelerator_synchronize": lambda s: torch.accelerator.synchronize(),
}


@pytest.mark.parametrize("wait", sorted(HOST_WAITS))
def test_every_host_wait_silences_the_report(on, wait):
    h = pending_d2h(4.0)
    HOST_WAITS[wait](torch.spyre.current_stream())
    assert (h + 1).tolist() == [5.0] * N
    assert h.numpy().sum() == 4.0 * N
    assert not _C._sanitizer_host_pending()


def test_a_wait_for_another_stream_does_not_order_the_copy(on):
    x = torch.full((N,), 1.0, device="spyre")
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with s:
        h = x.to("cpu", non_blocking=True)
    torch.spyre.current_stream().synchronize()  # the default stream: not s
    with pytest.raises(UnsynchronizedAccessError) as error:
        h.tolist()
    assert lines(error)[2] == (f"  earlier access: D2H writes host tensor float32[{N}] on {s!r}, "
                               "not ordered before it")
    assert lines(error)[-1] == fix(s.stream_id)
    s.synchronize()
    assert h.tolist() == [1.0] * N


def pending_h2d():
    src = torch.full((N,), 7.0).pin_memory()
    dst = torch.empty(N, device="spyre")
    dst.copy_(src, non_blocking=True)
    return src, dst


def test_writing_a_pending_h2d_source_is_write_after_read_and_reading_it_is_quiet(on):
    src, dst = pending_h2d()
    assert src.sum().item() == 7.0 * N  # reads race with nothing: the copy only reads it
    assert src.numpy()[0] == 7.0
    with pytest.raises(UnsynchronizedAccessError) as error:
        src.add_(1)
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (write-after-read)",
        f"  this access:    aten::add_.Tensor writes host tensor float32[{N}] on the host",
        f"  earlier access: H2D reads host tensor float32[{N}] on {DEFAULT}, not ordered before it",
        span(src),
    ]
    torch.spyre.current_stream().synchronize()
    src.add_(1)
    assert dst.cpu().tolist() == [7.0] * N


def test_pageable_non_blocking_copies_are_not_pending(on):
    """From or to pageable memory a non_blocking copy waits before returning (as CUDA)."""
    x = torch.full((N,), 3.0, device="spyre")
    h = torch.empty(N)
    h.copy_(x, non_blocking=True)
    assert not h.is_pinned() and not _C._sanitizer_host_pending()
    assert (h + 1).tolist() == [4.0] * N
    src = torch.ones(N)
    x.copy_(src, non_blocking=True)
    src.add_(1)
    assert x.cpu().tolist() == [1.0] * N


def test_the_report_does_not_depend_on_whether_the_copy_ran(on):
    s = torch.spyre.current_stream()
    with Gate() as gate:  # the copy has not run
        gate.block(s)
        h = pending_d2h()
        with pytest.raises(UnsynchronizedAccessError, match=r"\(read-after-write\)"):
            h.numpy()
    # The engine ran the copy, but the host never waited for it (the testing module's counters
    # are not host waits of the program): still a race.
    wait_until(lambda: completed_ops(s) == launched_ops(s), what="the copy")
    with pytest.raises(UnsynchronizedAccessError, match=r"\(read-after-write\)"):
        h.numpy()
    s.synchronize()
    assert h.numpy().sum() == float(N)


@pytest.mark.parametrize("ordered", [False, True])
def test_two_copies_through_one_pinned_buffer_on_two_streams_race(on, ordered):
    """The host bytes of copies are accesses of their streams like device bytes."""
    x = torch.full((N,), 1.0, device="spyre")
    y = torch.empty(N, device="spyre")
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    h = x.to("cpu", non_blocking=True)  # D2H writes h on the default stream
    if ordered:
        s.wait_stream(torch.spyre.current_stream())
        with s:
            y.copy_(h, non_blocking=True)
        s.synchronize()
        assert y.cpu().tolist() == [1.0] * N
        return
    with s, pytest.raises(UnsynchronizedAccessError) as error:
        y.copy_(h, non_blocking=True)  # H2D reads h on s: the D2H may not have written it
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        f"  this access:    H2D reads host tensor float32[{N}] on {s!r}",
        f"  earlier access: D2H writes host tensor float32[{N}] on {DEFAULT}, not ordered before it",
        span(h),
    ]


def test_the_check_costs_nothing_off_and_numpy_is_unwrapped():
    assert "numpy" not in torch.Tensor.__dict__ and "tolist" not in torch.Tensor.__dict__
    sanitizer.enable()
    assert torch.Tensor.numpy.__name__ == "numpy" and "numpy" in torch.Tensor.__dict__
    h = pending_d2h()
    assert _C._sanitizer_host_pending()
    sanitizer.disable()  # forgets the pending copy too
    assert not _C._sanitizer_host_pending()
    assert "numpy" not in torch.Tensor.__dict__ and "tolist" not in torch.Tensor.__dict__
    assert h.numpy().shape == (N,)


def test_a_pinned_block_handed_on_forgets_its_copies():
    """The pinned allocator hands a block on once the copies it recorded ran: the new owner's
    writes race with nothing (fresh process: the block is the only free one of its size)."""
    proc = run_python(WAIT_UNTIL + textwrap.dedent("""
        import torch
        from torch_spyre.testing import completed_ops, launched_ops
        torch.spyre.sanitizer.enable()
        x = torch.full((1000,), 1.0, device="spyre")
        h = x.to("cpu", non_blocking=True)
        first = h.data_ptr()
        del h                                   # freed while the copy is pending
        s = torch.spyre.current_stream()
        wait_until(lambda: completed_ops(s) == launched_ops(s), what="the copy")
        g = torch.empty(1000, pin_memory=True)  # the same block, handed on
        print(g.data_ptr() == first, torch.spyre._C._sanitizer_host_pending())
        g.fill_(5)
        print(g.sum().item())
        """), timeout=60)
    assert proc.stdout.splitlines() == ["True False", "5000.0"]


def test_warn_mode_prints_each_pending_copy_once_and_goes_on():
    proc = run_python("""
        import torch
        x = torch.full((4,), 1.0, device="spyre")
        h = x.to("cpu", non_blocking=True)
        y = h + 1                               # reported
        z = h * 2                               # the same copy: not again
        torch.spyre.synchronize()
        print("went on", h.tolist(), y.shape, z.shape)
        """, env={"TORCH_SPYRE_SANITIZER": "warn"}, timeout=60)
    assert proc.stdout.splitlines() == ["went on [1.0, 1.0, 1.0, 1.0] torch.Size([4]) torch.Size([4])"]
    assert proc.stderr.count("spyre sanitizer: unsynchronized access") == 1
    assert proc.stderr.startswith("spyre sanitizer: unsynchronized access (read-after-write)\n"
                                  "  this access:    aten::add.Tensor reads host tensor float32[4] on the host\n")


def test_the_hazard_tracker_leaves_the_host_alone():
    proc = run_python("""
        import torch
        x = torch.full((4,), 1.0, device="spyre")
        h = x.to("cpu", non_blocking=True)
        y = h + 1
        print(torch.spyre._C._sanitizer_host_pending(), "numpy" in torch.Tensor.__dict__)
        """, env={"SPYRE_HAZARD_TRACKER": "1", "TORCH_SPYRE_SANITIZER": ""}, timeout=60)
    assert proc.stdout.splitlines() == ["False False"]
    assert proc.stderr == ""
