"""Issue 33: the stream sanitizer (torch.spyre.sanitizer, csrc/sanitizer/). Two accesses to the
same device bytes, at least one a write, that no stream order, event, wait_stream or host wait
orders, are reported when the later one is launched: deterministic, whatever the engines do."""

import inspect
import re

import pytest
import torch

import torch_spyre  # noqa: F401
from _helpers import wait_until
from conftest import run_python
from torch_spyre import sanitizer
from torch_spyre.sanitizer import UnsynchronizedAccessError
from torch_spyre.testing import Gate

N = 1024  # float32 elements: 4096 bytes
DEFAULT = "torch.spyre.Stream(device=spyre:0, id=0, priority=0)"  # as reports name the default stream


def stream_name(stream_id):
    """A low-priority stream as torch.spyre.Stream prints it (and reports name it)."""
    return f"torch.spyre.Stream(device=spyre:0, id={stream_id}, priority=0)"


pytestmark = pytest.mark.usefixtures("own_sanitizer_mode")


@pytest.fixture
def on():
    """Raise mode for the test, starting from a device the host knows is idle."""
    torch.spyre.synchronize()
    sanitizer.enable()
    yield
    sanitizer.disable()
    torch.spyre.synchronize()


def line_after():
    """The caller's next line number (the launch under test)."""
    return inspect.currentframe().f_back.f_lineno + 1


def span(t, first=0, count=None):
    """The report's overlap text for `count` elements of `t` from element `first`."""
    count = t.numel() if count is None else count
    start = t.data_ptr() + first * t.element_size()
    nbytes = count * t.element_size()
    return f"  overlapping bytes: [{hex(start)}, {hex(start + nbytes)}) ({nbytes} bytes)"


def lines(error):
    return str(error.value).splitlines()


def both_accesses(this, earlier, s, what=f"tensor float32[{N}]"):
    """The report's two access lines: `this` on the default stream, `earlier` on `s`."""
    return [f"  this access:    {this} {what} on {DEFAULT}",
            f"  earlier access: {earlier} {what} on {s!r}, not ordered before it"]


def ready(values=1.0, n=N):
    """A tensor written on the default stream, which the host then waited for."""
    t = torch.full((n,), values, device="spyre")
    torch.spyre.synchronize()
    return t


def test_enable_and_disable():
    assert sanitizer.is_enabled() is False
    sanitizer.enable("warn")
    assert sanitizer.is_enabled() is True
    sanitizer.disable()
    assert sanitizer.is_enabled() is False
    assert issubclass(UnsynchronizedAccessError, RuntimeError)
    assert torch.spyre.sanitizer is sanitizer
    import torch.spyre.sanitizer as by_torch_name  # one module, one error class

    assert by_torch_name is sanitizer


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match=r"sanitizer mode must be one of \['raise', 'warn'\], got 'loud'"):
        sanitizer.enable("loud")
    assert sanitizer.is_enabled() is False


@pytest.mark.parametrize("mode, shown", [(["raise"], "['raise'] of type list"), (1, "1 of type int"),
                                         (None, "None of type NoneType")])
def test_a_mode_that_is_not_a_str_is_refused_by_name(mode, shown):
    expected = "sanitizer.enable: mode must be a str, one of ['raise', 'warn'], got " + shown
    with pytest.raises(TypeError) as info:
        sanitizer.enable(mode=mode)
    assert str(info.value) == expected
    assert sanitizer.is_enabled() is False


def test_read_after_write_on_another_stream(on):
    x = ready()
    s = torch.spyre.Stream()
    with s:
        first = line_after()
        y = x * 2
    with pytest.raises(UnsynchronizedAccessError) as error:
        second = line_after()
        y + 1
    text = lines(error)
    assert text[:4] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        f"  this access:    aten::add.Tensor reads tensor float32[{N}] on {DEFAULT}",
        f"  earlier access: aten::mul.Tensor writes tensor float32[{N}] on {s!r}, "
        "not ordered before it",
        span(y),
    ]
    assert text[4] == "  earlier access launched at:"
    where = text.index("  this access launched at:")
    assert text[where - 1] == f"    {__file__}:{first} in test_read_after_write_on_another_stream"
    assert text[where + 1:where + 2] != []
    assert text[-2] == f"    {__file__}:{second} in test_read_after_write_on_another_stream"
    # The line to write: the default stream (this access's) waits for s, named as it prints.
    assert text[-1] == (
        f"  fix: {DEFAULT} must wait for {s!r} before this access: "
        f"torch.spyre.default_stream().wait_stream(<{s!r}>) (or an Event recorded on <{s!r}> after "
        "the earlier access, waited on with torch.spyre.default_stream().wait_event(event)); if the "
        f"earlier access's tensor was freed, call its record_stream(<{s!r}>) before freeing it")


def test_a_side_stream_reading_what_the_default_stream_made_is_told_to_wait_for_it(on):
    # The first hour's mistake: a tensor made on the default stream (a device-side random
    # factory: not a copy from the host), read on a side stream with no wait_stream.
    x = torch.randn(N, device="spyre")
    s = torch.spyre.Stream()
    with pytest.raises(UnsynchronizedAccessError) as error:
        with s:
            x * 2
    text = lines(error)
    assert text[:3] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        f"  this access:    aten::mul.Tensor reads tensor float32[{N}] on {s!r}",
        f"  earlier access: aten::normal_ writes tensor float32[{N}] on {DEFAULT}, not ordered before it",
    ]
    assert text[-1] == (
        f"  fix: {s!r} must wait for {DEFAULT} before this access: "
        f"<{s!r}>.wait_stream(torch.spyre.default_stream()) (or an Event recorded on "
        "torch.spyre.default_stream() after the earlier access, waited on with "
        f"<{s!r}>.wait_event(event)); if the earlier access's tensor was freed, call its "
        "record_stream(torch.spyre.default_stream()) before freeing it")
    s.wait_stream(torch.spyre.current_stream())  # the fix: then the same read is quiet
    with s:
        y = x * 2
    torch.spyre.current_stream().wait_stream(s)
    assert torch.equal(y.cpu(), x.cpu() * 2)


def test_write_after_read_on_another_stream(on):
    x = ready()
    s = torch.spyre.Stream()
    with s:
        total = x.sum()
    with pytest.raises(UnsynchronizedAccessError) as error:
        x.add_(1)
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (write-after-read)",
        f"  this access:    aten::add_.Tensor writes tensor float32[{N}] on {DEFAULT}",
        f"  earlier access: aten::sum.dim_IntList reads tensor float32[{N}] on {s!r}, "
        "not ordered before it",
        span(x),
    ]
    torch.spyre.current_stream().wait_stream(s)
    assert total.item() == N


def test_write_after_write_is_refused_before_anything_is_queued(on):
    y = ready(0.0)
    s = torch.spyre.Stream()
    with s:
        y.fill_(3)
    with pytest.raises(UnsynchronizedAccessError) as error:
        y.copy_(torch.full((N,), 5.0, device="spyre"))
    assert lines(error)[:3] == [
        "spyre sanitizer: unsynchronized access (write-after-write)",
        f"  this access:    D2D writes tensor float32[{N}] on {DEFAULT}",
        f"  earlier access: aten::fill_.Scalar writes tensor float32[{N}] on {s!r}, "
        "not ordered before it",
    ]
    torch.spyre.synchronize()
    assert y.cpu().tolist() == [3.0] * N  # the refused copy never ran


def test_reads_on_two_streams_are_not_a_race(on):
    x = ready(2.0)
    s = torch.spyre.Stream()
    with s:
        a = x * 3
    b = x * 4
    torch.spyre.synchronize()
    assert (a.sum().item(), b.sum().item()) == (6.0 * N, 8.0 * N)


def test_one_stream_is_ordered_by_itself(on):
    s = torch.spyre.Stream()
    with s:
        x = torch.zeros(N, device="spyre")
        for _ in range(5):
            x.add_(1)
            x.mul_(2)
        y = x.clone()
    s.synchronize()
    assert y.cpu().tolist() == [62.0] * N


def wait_stream(s):
    torch.spyre.current_stream().wait_stream(s)


def spyre_event(s):
    e = torch.spyre.Event()
    e.record(s)
    torch.spyre.current_stream().wait_event(e)


def generic_event(s):
    e = torch.Event(device="spyre")
    e.record(s)
    e.wait(torch.accelerator.current_stream())


def event_synchronize(s):
    e = torch.spyre.Event()
    e.record(s)
    e.synchronize()


def event_query(s):
    e = torch.spyre.Event()
    e.record(s)
    wait_until(e.query, what="the event")  # the host learns it is done from a query


def stream_query(s):
    wait_until(s.query, what="the stream")


def blocking_copy(s):
    with s:
        torch.ones(1, device="spyre").cpu()  # a blocking copy waits for stream s


ORDERINGS = {
    "wait_stream": wait_stream,
    "spyre_event": spyre_event,
    "generic_event": generic_event,
    "event_synchronize": event_synchronize,
    "event_query": event_query,
    "stream_query": stream_query,
    "stream_synchronize": lambda s: s.synchronize(),
    "device_synchronize": lambda s: torch.spyre.synchronize(),
    "accelerator_synchronize": lambda s: torch.accelerator.synchronize(),
    "blocking_copy": blocking_copy,
}


@pytest.mark.parametrize("order", sorted(ORDERINGS))
def test_every_ordering_edge_silences_the_report(on, order):
    x = ready(1.0)
    s = torch.spyre.Stream()
    with Gate() as gate:  # holds s until the accesses below are launched
        gate.block(s)
        with s:
            y = x * 2
            x.add_(10)
    ORDERINGS[order](s)
    z = y + x  # reads both on the default stream: ordered now
    assert z.cpu().tolist() == [13.0] * N


def test_a_race_is_reported_while_the_earlier_work_is_held(on):
    x = ready()
    s = torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        with s:
            y = x * 2
        with pytest.raises(UnsynchronizedAccessError, match=r"\(read-after-write\)"):
            y.sum()
    s.synchronize()
    assert y.sum().item() == 2.0 * N


def test_views_are_tracked_by_their_bytes(on):
    x = ready(0.0)
    s = torch.spyre.Stream()
    with s:
        x[: N // 2].fill_(1)
    x[N // 2:].fill_(2)  # disjoint halves: no race
    with pytest.raises(UnsynchronizedAccessError) as error:
        x[N // 4: 3 * N // 4].sum()  # straddles both halves: races with the first only
    assert lines(error)[1:4] == [
        f"  this access:    aten::sum.dim_IntList reads tensor float32[{N // 2}] on {DEFAULT}",
        f"  earlier access: aten::fill_.Scalar writes tensor float32[{N // 2}] on {s!r}, "
        "not ordered before it",
        span(x, N // 4, N // 4),
    ]
    torch.spyre.synchronize()
    assert x.sum().item() == 1.0 * N // 2 + 2.0 * N // 2


def test_interleaved_strided_views_do_not_overlap(on):
    x = ready(0.0)
    s = torch.spyre.Stream()
    with s:
        x[0::2].fill_(1)  # even elements
    x[1::2].fill_(2)  # odd elements: no byte in common
    m = x.view(N // 2, 2)
    with pytest.raises(UnsynchronizedAccessError) as error:
        m[:, 1:].t().mul_(3)  # odd elements, transposed: still no race with the even fill ...
        m[3:5].sum()  # ... but rows 3-4 read even elements too
    assert lines(error)[1] == f"  this access:    aten::sum.dim_IntList reads tensor float32[2, 2] on {DEFAULT}"
    assert lines(error)[3] == span(x, 6, 1)
    torch.spyre.synchronize()
    assert x[:4].cpu().tolist() == [1.0, 6.0, 1.0, 6.0]


def test_copies_from_and_to_the_host(on):
    host = torch.arange(N, dtype=torch.float32).pin_memory()
    x = ready(0.0)
    s = torch.spyre.Stream()
    with s:
        x.copy_(host, non_blocking=True)
    with pytest.raises(UnsynchronizedAccessError) as error:
        x.max()
    assert lines(error)[1:3] == both_accesses("aten::max reads", "H2D writes", s)
    wait_stream(s)
    back = torch.empty(N, dtype=torch.float32).pin_memory()
    with s:
        back.copy_(x, non_blocking=True)  # reads x on s: ordered after the H2D by stream order
    with pytest.raises(UnsynchronizedAccessError) as error:
        x.zero_()
    assert lines(error)[1:3] == both_accesses("aten::fill_.Scalar writes", "D2H reads", s)
    s.synchronize()
    assert back.tolist() == host.tolist()


def test_random_fills_are_writes(on):
    s = torch.spyre.Stream()
    x = ready(0.0)
    with s:
        x.uniform_()  # drawn on the host, copied in on s
    with pytest.raises(UnsynchronizedAccessError) as error:
        x.sum()
    # Named as the op it is, not as the copy that carries its numbers to the device.
    assert lines(error)[2] == (f"  earlier access: aten::uniform_ writes tensor float32[{N}] on {s!r}, "
                               "not ordered before it")


def test_a_synchronous_op_reading_what_another_stream_writes_is_reported(on):
    # nonzero's output shape depends on the data: it runs at the call, its argument copied to
    # the host on the current stream (a read the sanitizer sees, named as the op).
    x = ready(0.0)
    s = torch.spyre.Stream()
    with s:
        x.fill_(1.0)
    with pytest.raises(UnsynchronizedAccessError) as error:
        torch.nonzero(x)
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        *both_accesses("aten::nonzero reads", "aten::fill_.Scalar writes", s),
        span(x),
    ]
    wait_stream(s)
    assert torch.nonzero(x).cpu().view(-1).tolist() == list(range(N))


def test_a_synchronous_op_writing_in_place_what_another_stream_reads_is_reported(on):
    # A boolean index is data dependent: the in-place write goes back to the device as a
    # copy queued on the current stream, which the sanitizer checks before queueing it.
    x = ready(0.0)
    mask = ready(True).to(torch.bool)
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with s:
        total = x.sum()
    with pytest.raises(UnsynchronizedAccessError) as error:
        x[mask] = 3.0
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (write-after-read)",
        *both_accesses("aten::_index_put_impl_ writes", "aten::sum.dim_IntList reads", s),
        span(x),
    ]
    wait_stream(s)
    assert total.item() == 0.0
    assert x.cpu().tolist() == [0.0] * N  # refused before the write was queued
    x[mask] = 3.0
    assert x.cpu().tolist() == [3.0] * N


def test_batch_norms_undeclared_running_stat_writes_are_seen(on):
    # native_batch_norm's schema declares no write, but in training its kernel
    # updates running_mean and running_var: a read of them on another stream
    # races with it. In evaluation it only reads them: no race.
    x = ready(1.0, n=32).view(8, 4)
    mean, var = ready(0.0, n=4), ready(1.0, n=4)
    s = torch.spyre.Stream()
    with s:
        torch.nn.functional.batch_norm(x, mean, var, training=False)
    mean + 1  # reads on two streams
    s.wait_stream(torch.spyre.default_stream())  # the next write comes after that read
    with s:
        torch.nn.functional.batch_norm(x, mean, var, training=True, momentum=0.5)
    with pytest.raises(UnsynchronizedAccessError) as error:
        mean + 1
    assert lines(error)[:4] == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        *both_accesses("aten::add.Tensor reads", "aten::native_batch_norm writes", s,
                       what="tensor float32[4]"),
        span(mean),
    ]
    wait_stream(s)
    assert mean.cpu().tolist() == [0.5] * 4  # 0.5 * 0 + 0.5 * 1
    assert var.cpu().tolist() == [0.5] * 4  # 0.5 * 1 + 0.5 * 0 (unbiased variance 0)


def test_warn_mode_prints_the_report_and_goes_on(capfd):
    x = ready()
    s = torch.spyre.Stream()
    sanitizer.enable("warn")
    try:
        with s:
            y = x * 2
        z = y + 1
    finally:
        sanitizer.disable()
    torch.spyre.synchronize()
    err = capfd.readouterr().err
    assert err.startswith("spyre sanitizer: unsynchronized access (read-after-write)\n")
    assert f"  earlier access: aten::mul.Tensor writes tensor float32[{N}] on {s!r}" in err
    assert z.shape == (N,)  # launched; its values are the race's (y may not have been written)


def test_freed_tensors_reused_across_streams_are_ordered_by_the_allocator(on):
    s = torch.spyre.Stream()
    for _ in range(20):
        x = ready()
        with s:
            y = x * 2  # x's block is recorded as used by s
        del x  # freed while s may still read it: reused only once s is done with it
        z = torch.full((N,), 7.0, device="spyre")
        wait_stream(s)
        assert (y + z).sum().item() == 9.0 * N


def test_disable_forgets_what_it_saw():
    x = ready()
    s = torch.spyre.Stream()
    sanitizer.enable()
    with s:
        y = x * 2
    sanitizer.disable()
    sanitizer.enable()
    try:
        z = y + 1  # the mul on s was forgotten: no report (the values are the race's)
    finally:
        sanitizer.disable()
    torch.spyre.synchronize()
    assert z.shape == (N,)


def test_the_environment_turns_it_on_at_import():
    code = """
        import torch
        from torch.spyre.sanitizer import UnsynchronizedAccessError
        print(torch.spyre.sanitizer.is_enabled())
        x = torch.ones(8, device="spyre")
        torch.spyre.synchronize()
        s = torch.spyre.Stream()
        with s:
            y = x * 2
        try:
            y + 1
        except UnsynchronizedAccessError as e:
            print(str(e).splitlines()[0])
        """
    assert run_python(code, env={"TORCH_SPYRE_SANITIZER": "1"}).stdout.splitlines() == [
        "True", "spyre sanitizer: unsynchronized access (read-after-write)"]
    for off in ("0", ""):  # off by default: unset or empty
        assert run_python(code, env={"TORCH_SPYRE_SANITIZER": off}).stdout.splitlines() == ["False"]


def test_a_bad_environment_value_names_itself():
    proc = run_python("import torch", env={"TORCH_SPYRE_SANITIZER": "yes"}, check=False)
    assert proc.returncode == 1
    assert "ValueError: TORCH_SPYRE_SANITIZER must be 0, 1 or warn, got 'yes'" in proc.stderr


@pytest.mark.slow
def test_compiled_kernels_are_tracked(on, fresh_dynamo):
    f = torch.compile(lambda a: a.sin() + 1)
    x = ready(0.0)
    f(x)  # compiles (no race: one stream)
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with s:
        out = f(x)
    with pytest.raises(UnsynchronizedAccessError) as error:
        out.sum()
    assert re.fullmatch(rf"  earlier access: cpp_fused_\w+ writes tensor float32\[{N}\] "
                        rf"on {re.escape(repr(s))}, not ordered before it", lines(error)[2])
    with pytest.raises(UnsynchronizedAccessError) as error:
        x.fill_(1)  # the compiled kernel on s reads x
    assert re.fullmatch(rf"  earlier access: cpp_fused_\w+ reads tensor float32\[{N}\] "
                        rf"on {re.escape(repr(s))}, not ordered before it", lines(error)[2])
    wait_stream(s)
    assert out.sum().item() == 1.0 * N


HAZARD = """
    import torch
    from torch_spyre import _C
    from torch_spyre.testing import Gate
    print(torch.spyre.sanitizer.is_enabled(), _C._sanitizer_mode())
    x = torch.full((1024,), 1.0, device="spyre")
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        with s:
            y = x * 2                    # held by the gate
        z = y + 1                        # races with it: ordered after it instead
        x.add_(10)                       # write-after-read with the held mul: ordered too
        w = x * 0 + 5                    # after add_ on this stream already: no new wait
        print(torch.spyre.current_stream().query(), _C._sanitizer_ordering_waits())
    print(z.cpu().unique().tolist(), y.cpu().unique().tolist(), x.cpu().unique().tolist(),
          w.cpu().unique().tolist())
    """


def test_the_hazard_tracker_orders_racing_launches_instead_of_reporting():
    proc = run_python(HAZARD, env={"SPYRE_HAZARD_TRACKER": "1", "TORCH_SPYRE_SANITIZER": ""})
    assert proc.stdout.splitlines() == [
        "False 3",
        "False 1",  # the default stream waits for s (one wait: the add_ was already behind it)
        "[3.0] [2.0] [11.0] [5.0]",  # what program order says
    ]
    assert proc.stderr == ""


@pytest.mark.parametrize("value, on", [
    ("1", True), ("true", True), ("True", True), ("TRUE", True), ("t", True), ("T", True),
    ("yes", True), ("YES", True), ("y", True), ("Y", True), (" 1 ", True),
    ("", False), ("0", False), ("false", False), ("False", False), ("f", False), ("no", False),
    ("NO", False), ("n", False), ("N", False),
])
def test_the_hazard_tracker_switch_takes_upstreams_values(monkeypatch, recwarn, value, on):
    monkeypatch.setenv("SPYRE_HAZARD_TRACKER", value)
    assert sanitizer._hazard_tracker_from_environment() is on
    assert len(recwarn) == 0


@pytest.mark.parametrize("value", ["2", "on", "enable", "yess", "-1"])
def test_another_hazard_tracker_value_warns_and_leaves_it_off(monkeypatch, value):
    monkeypatch.setenv("SPYRE_HAZARD_TRACKER", value)
    expected = (f"SPYRE_HAZARD_TRACKER={value!r} is not one of 1/true/t/yes/y (on) or "
                "0/false/f/no/n (off), in any case; the hazard tracker stays off")
    with pytest.warns(RuntimeWarning) as warned:
        assert sanitizer._hazard_tracker_from_environment() is False
    assert [str(w.message) for w in warned] == [expected]


def test_the_hazard_tracker_switch_at_import():
    mode = "import torch; print(torch.spyre._C._sanitizer_mode())"
    proc = run_python(mode, env={"SPYRE_HAZARD_TRACKER": "true", "TORCH_SPYRE_SANITIZER": ""})
    assert (proc.stdout, proc.stderr) == ("3\n", "")  # on (it broke `import torch` before)
    proc = run_python(mode, env={"SPYRE_HAZARD_TRACKER": "maybe", "TORCH_SPYRE_SANITIZER": ""})
    assert proc.stdout == "0\n"  # off, with a warning; torch imports
    assert ("RuntimeWarning: SPYRE_HAZARD_TRACKER='maybe' is not one of 1/true/t/yes/y (on) or "
            "0/false/f/no/n (off), in any case; the hazard tracker stays off") in proc.stderr
    proc = run_python("import torch", env={"SPYRE_HAZARD_TRACKER": "Yes", "TORCH_SPYRE_SANITIZER": "1"},
                      check=False)
    assert ("ValueError: TORCH_SPYRE_SANITIZER and SPYRE_HAZARD_TRACKER are both set" in proc.stderr)
    assert run_python(mode, env={"SPYRE_HAZARD_TRACKER": "0", "TORCH_SPYRE_SANITIZER": ""}).stdout == "0\n"


def test_collectives_are_tracked():
    proc = run_python("""
        import os, torch, torch.distributed as dist
        from torch.spyre.sanitizer import UnsynchronizedAccessError
        dist.init_process_group("spyreccl", init_method="file://" + os.path.abspath("store"),
                                rank=0, world_size=1)
        x = torch.ones(1024, device="spyre")
        torch.spyre.synchronize()
        torch.spyre.sanitizer.enable()
        work = dist.all_reduce(x, async_op=True)   # gloo reduces x in place
        try:
            x * 2                                  # before work.wait(): a race
        except UnsynchronizedAccessError as e:
            print(*str(e).splitlines()[:3], sep="\\n")
        work.wait()                                # the current stream waits for it
        print((x * 2)[0].item())
        strided = torch.ones(8, 8, device="spyre").t()  # staged: copied out and back
        dist.all_reduce(strided)
        print(strided.sum().item())
        torch.spyre.sanitizer.disable()
        dist.destroy_process_group()
        """)
    comm = 1  # the group's communication stream: the first pool stream of the process
    assert proc.stdout.splitlines() == [
        "spyre sanitizer: unsynchronized access (read-after-write)",
        f"  this access:    aten::mul.Tensor reads tensor float32[{N}] on {DEFAULT}",
        f"  earlier access: allreduce writes tensor float32[{N}] on {stream_name(comm)}, not ordered before it",
        "2.0",
        "64.0",
    ]


@pytest.mark.parametrize("op", ["x.add_(1)", "x.fill_(2.0)", "x.copy_(y)", "x[::2].copy_(y[::2])"])
def test_a_launch_that_raises_leaves_no_access_behind(op):
    # A stream in error state refuses every launch after the check: the refused op accessed
    # nothing, so a later access on another stream is no race (it was reported as one).
    proc = run_python(f"""
        import torch
        from torch_spyre import sanitizer
        from torch_spyre.testing import inject_fault
        x = torch.ones(8, device="spyre")
        y = torch.full((8,), 3.0, device="spyre")
        torch.spyre.synchronize()
        s = torch.spyre.Stream()
        inject_fault(s, "ECC error")
        with s:
            torch.spyre._sleep(1)
        try:
            s.synchronize()
        except RuntimeError as e:
            print(e)
        sanitizer.enable()
        with s:
            try:
                {op}
            except RuntimeError as e:
                print("refused:", e)
        x.add_(10)             # the default stream: no earlier access to race with
        print(x.cpu().tolist())
        sanitizer.disable()
        """)
    assert proc.stdout.splitlines() == [
        "ECC error",
        "refused: Cannot schedule operation on stream in error state: ECC error",
        str([11.0] * 8),
    ]
    assert proc.stderr == ""
