"""Issue 6: torch.Event / torch.spyre.Event over flex::RuntimeEvent: the guard's
event methods, CUDA ordering semantics across streams, timing, and the cases of
PyTorch's reference backend (openreg) test_event.py / test_streams.py adapted
to one device per process.

Ordering is proved with gates (a gated stream cannot make progress until the
test releases it); sleeps appear only where time itself is measured."""

import gc
import threading
import time

import pytest
import torch
from torch_spyre.testing import Gate

from conftest import run_python


pytestmark = pytest.mark.usefixtures("drained_device")  # conftest.py


def spyre_full(value, size=(4,)):
    return torch.full(size, float(value), device="spyre")


# ---------------------------------------------------------------- creation and ids


@pytest.mark.parametrize("device", ["spyre", "spyre:0", None])
def test_event_create(device):
    # openreg test_event_create: no native event, hence no index and id 0, until the first record.
    e = torch.Event() if device is None else torch.Event(device=device)
    assert e.device.type == "spyre"
    assert e.device.index is None
    assert e.event_id == 0
    assert repr(e) == "torch.Event device_type=spyre, device_index=-1, event_flag=0, event_id=0"
    recorded = torch.spyre.Stream().record_event()
    assert recorded.device == torch.device("spyre:0")
    assert recorded.event_id != 0


def test_first_record_takes_the_device_from_the_stream():
    # The guard's record() receives device index -1 the first time.
    e = torch.Event(device="spyre", enable_timing=True)
    e.record(torch.spyre.Stream())
    assert e.device == torch.device("spyre:0")
    assert repr(e).startswith("torch.Event device_type=spyre, device_index=0, event_flag=1, event_id=")


def test_event_ids():
    # openreg test_event_record: distinct events have distinct non-zero ids.
    s = torch.spyre.Stream()
    e1, e2 = s.record_event(), s.record_event()
    assert e1.event_id != 0 and e2.event_id != 0 and e1.event_id != e2.event_id
    # One native event per torch.Event: re-recording keeps the id.
    first_id = e1.event_id
    e1.record(torch.spyre.Stream())
    assert e1.event_id == first_id


# ---------------------------------------------------------------- unrecorded events


def test_unrecorded_event_is_complete_and_waits_are_no_ops():
    e = torch.Event(device="spyre")
    assert e.query() is True
    e.synchronize()
    s = torch.spyre.Stream()
    s.wait_event(e)
    e.wait(s)
    with s:
        e.wait()
    # A real wait on an incomplete record would leave the stream busy.
    assert s.query() is True
    assert e.event_id == 0


# ---------------------------------------------------------------- record / query / synchronize


def test_event_query():
    # openreg test_event_query.
    assert torch.Event().query() is True
    e = torch.spyre.Stream().record_event()
    e.synchronize()
    assert e.query() is True


def test_event_synchronize():
    # openreg test_event_synchronize.
    s = torch.spyre.Stream()
    e = torch.Event()
    assert e.query() is True
    e.record(s)
    e.synchronize()
    assert e.query() is True


def test_event_completes_when_prior_work_has_finished():
    s = torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        e = s.record_event()
        assert e.query() is False
        e.query()  # querying has no side effect
        assert e.query() is False
        gate.release()
        e.synchronize()
        assert e.query() is True


def test_event_captures_only_work_launched_before_record():
    s = torch.spyre.Stream()
    e = s.record_event()
    with Gate() as gate:
        gate.block(s)  # launched after the record: not part of it
        e.synchronize()
        assert e.query() is True
        assert s.query() is False


def test_record_and_wait_default_to_the_current_stream():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    e = torch.Event(device="spyre")
    with Gate() as gate:
        gate.block(producer)
        with producer:
            e.record()  # Event.record(stream=None): the current stream
        assert e.query() is False
        with consumer:
            e.wait()  # Event.wait(stream=None): the current stream
        assert consumer.query() is False
        gate.release()
        consumer.synchronize()
    assert e.query() is True and consumer.query() is True


def test_synchronize_lets_other_threads_run():
    # The host wait releases the GIL: the releasing thread can run while the main thread waits.
    s = torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        e = s.record_event()
        releaser = threading.Timer(0.05, gate.release)
        releaser.start()
        e.synchronize()
        releaser.join()
    assert e.query() is True


def test_record_on_a_failed_stream_leaves_the_event_unrecorded():
    proc = run_python(
        """
        import torch
        s = torch.spyre.current_stream()
        torch.spyre._sleep(1)                 # the first operation fails
        try:
            s.synchronize()
        except RuntimeError as e:
            print("sync:", e)
        e = torch.Event(device="spyre")
        try:
            e.record(s)
        except RuntimeError as err:
            print("record:", str(err).splitlines()[0])
        print(e.event_id, e.query(), e.device.index)
        ok = torch.spyre.Stream()
        e.record(ok)                          # a healthy stream records normally
        e.synchronize()
        print(e.event_id != 0, e.query())
        """,
        env={"FLEX_STUB_FAULT_AFTER": "0"},
    )
    assert proc.stdout.splitlines() == [
        "sync: flex: injected fault (FLEX_STUB_FAULT_AFTER=0)",
        "record: Cannot schedule operation on stream in error state: "
        "flex: injected fault (FLEX_STUB_FAULT_AFTER=0)",
        "0 True None",
        "True True",
    ]


# ---------------------------------------------------------------- cross-stream ordering


@pytest.mark.races  # reads y on the default stream to show the copy has not run
def test_wait_event_orders_later_work_without_blocking_the_host():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    x = spyre_full(0)
    y = spyre_full(0)
    torch.spyre.synchronize()
    with Gate() as gate:
        gate.block(producer)
        with producer:
            x.fill_(7)
        e = producer.record_event()
        consumer.wait_event(e)  # returns while the producer is held: the host did not wait
        with consumer:
            y.copy_(x)
        assert consumer.query() is False
        assert e.query() is False
        assert y.cpu().tolist() == [0.0] * 4  # read on the default stream: the copy has not run
        gate.release()
        consumer.synchronize()
    assert e.query() is True
    assert y.cpu().tolist() == [7.0] * 4


def test_other_streams_are_not_held_by_a_wait():
    producer, consumer, bystander = (torch.spyre.Stream() for _ in range(3))
    with Gate() as gate:
        gate.block(producer)
        consumer.wait_event(producer.record_event())
        with bystander:
            torch.spyre._sleep(0)
        bystander.synchronize()
        assert bystander.query() is True
        assert consumer.query() is False


def test_a_waiting_stream_does_not_occupy_an_engine():
    # One engine: if the parked consumer held it, the bystander could never run.
    proc = run_python(
        """
        import torch
        from torch_spyre.testing import Gate
        producer, consumer, bystander = (torch.spyre.Stream() for _ in range(3))
        with Gate() as gate:
            gate.block(producer)
            consumer.wait_event(producer.record_event())
            with consumer:
                torch.spyre._sleep(0)
            with bystander:
                torch.spyre._sleep(0)
            bystander.synchronize()
            print(bystander.query(), consumer.query())
            gate.release()
            consumer.synchronize()
            print(consumer.query())
        """,
        env={"FLEX_STUB_ENGINES": "1"},
    )
    assert proc.stdout.split() == ["True", "False", "True"]


def test_wait_stream():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    x, y = spyre_full(0), spyre_full(0)
    torch.spyre.synchronize()
    with Gate() as gate:
        gate.block(producer)
        with producer:
            x.fill_(3)
        # wait_stream records a temporary event and destroys it at once: the wait survives it.
        consumer.wait_stream(producer)
        with consumer:
            y.copy_(x)
        assert consumer.query() is False
        gate.release()
        consumer.synchronize()
    assert y.cpu().tolist() == [3.0] * 4


def test_event_wait_with_an_explicit_stream():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    with Gate() as gate:
        gate.block(producer)
        e = torch.Event(device="spyre")
        e.record(producer)
        e.wait(consumer)
        assert consumer.query() is False
        gate.release()
        consumer.synchronize()
    assert e.query() is True


def test_destroy_while_record_and_wait_are_pending():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    x, y = spyre_full(0), spyre_full(0)
    torch.spyre.synchronize()
    with Gate() as gate:
        gate.block(producer)
        with producer:
            x.fill_(5)
        e = torch.Event(device="spyre", enable_timing=True)
        e.record(producer)
        consumer.wait_event(e)
        del e  # destroyEvent with the record and the wait still queued
        gc.collect()
        with consumer:
            y.copy_(x)
        assert consumer.query() is False
        gate.release()
        consumer.synchronize()
        producer.synchronize()
    assert y.cpu().tolist() == [5.0] * 4


@pytest.mark.races  # reads y on the default stream to show the copy has not run
def test_rerecord_while_a_wait_is_pending_neither_deadlocks_nor_releases_early():
    s1, s2, s3 = (torch.spyre.Stream() for _ in range(3))
    x, y = spyre_full(0), spyre_full(0)
    torch.spyre.synchronize()
    with Gate() as gate1:
        gate1.block(s1)
        with s1:
            x.fill_(9)
        e = s1.record_event()
        s2.wait_event(e)
        with s2:
            y.copy_(x)
        e.record(s3)  # s3 is idle: the new record completes at once
        e.synchronize()  # no deadlock: waits for the latest record only
        assert e.query() is True
        assert s2.query() is False  # still held by the first record
        assert y.cpu().tolist() == [0.0] * 4
        gate1.release()
        s2.synchronize()
    assert y.cpu().tolist() == [9.0] * 4


def test_wait_after_rerecord_waits_for_the_new_record():
    s1, s2, s3 = (torch.spyre.Stream() for _ in range(3))
    e = s1.record_event()
    e.synchronize()
    with Gate() as gate:
        gate.block(s3)
        e.record(s3)
        assert e.query() is False
        s2.wait_event(e)
        assert s2.query() is False
        gate.release()
        s2.synchronize()
    assert e.query() is True


# ---------------------------------------------------------------- timing


def sleep_between_records(ms):
    """Elapsed time of two timed events recorded around a device sleep of `ms`."""
    start = torch.Event(device="spyre", enable_timing=True)
    end = torch.Event(device="spyre", enable_timing=True)
    s = torch.spyre.Stream()
    with s:
        start.record()
        torch.spyre._sleep(ms)
        end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert end.elapsed_time(start) == pytest.approx(-elapsed)  # signed, as on CUDA
    return elapsed


def test_elapsed_time_covers_the_device_sleep():
    # A lower bound only: a late wake-up on a loaded machine lengthens it (the window is slow).
    assert sleep_between_records(30) >= 29


# Upper bounds on device time are windows a loaded machine can overrun: slow tier.
@pytest.mark.slow
def test_elapsed_time_around_device_sleep():
    ms = sleep_between_records(300)
    # At least the sleep; the bound above leaves room for a late wake-up on a busy machine
    # (an engine waiting 100 ms and more for a core) and still catches a sleep counted twice.
    assert 290 <= ms <= 550, ms


def test_elapsed_time_back_to_back_is_positive():
    # openreg test_event_elapsed_time: timestamps are monotonic and distinct.
    s = torch.spyre.Stream()
    e1 = torch.Event(device="spyre:0", enable_timing=True)
    e2 = torch.Event(device="spyre:0", enable_timing=True)
    e1.record(s)
    e2.record(s)
    s.synchronize()
    assert e1.query() is True and e2.query() is True
    assert e1.elapsed_time(e2) > 0


@pytest.mark.slow  # an upper bound on device time
def test_elapsed_time_is_device_time_not_host_time():
    # Gated before the first record: host time spent before the release does not count.
    s = torch.spyre.Stream()
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    with Gate() as gate:
        gate.block(s)
        start.record(s)
        with s:
            torch.spyre._sleep(100)
        end.record(s)
        time.sleep(0.2)  # host time, measured not to appear in the result
        gate.release()
        end.synchronize()
    # 300 ms and more if the host's 200 ms counted; slack for a late wake-up on a busy machine.
    assert 90 <= start.elapsed_time(end) < 290


@pytest.mark.parametrize("timing", [(False, False), (True, False), (False, True)])
def test_elapsed_time_needs_timing_on_both_events(timing):
    # openreg test_event_timing_disabled; the ValueError comes from torch.
    s = torch.spyre.Stream()
    e1 = torch.Event(device="spyre", enable_timing=timing[0])
    e2 = torch.Event(device="spyre", enable_timing=timing[1])
    e1.record(s)
    e2.record(s)
    s.synchronize()
    with pytest.raises(ValueError) as info:
        e1.elapsed_time(e2)
    assert str(info.value) == "Both events must be created with argument 'enable_timing=True'."


def test_elapsed_time_needs_both_events_recorded():
    e1 = torch.Event(device="spyre", enable_timing=True)
    e2 = torch.Event(device="spyre", enable_timing=True)
    e1.record(torch.spyre.Stream())
    e1.synchronize()
    for a, b in ((e1, e2), (e2, e1)):
        with pytest.raises(ValueError) as info:
            a.elapsed_time(b)
        assert str(info.value) == "Both events must be recorded before calculating elapsed time."


def test_elapsed_time_needs_both_events_complete():
    s = torch.spyre.Stream()
    e1 = torch.Event(device="spyre", enable_timing=True)
    e2 = torch.Event(device="spyre", enable_timing=True)
    e1.record(s)
    with Gate() as gate:
        gate.block(s)
        e2.record(s)
        with pytest.raises(RuntimeError, match="^Both events must be completed before calculating elapsed time."):
            e1.elapsed_time(e2)
        gate.release()
        e2.synchronize()
    assert e1.elapsed_time(e2) >= 0


# ---------------------------------------------------------------- host waits do not spin


@pytest.mark.slow  # process CPU time over 0.3 s of wall time
@pytest.mark.parametrize("blocking", [True, False])
def test_synchronize_sleeps_instead_of_spinning(blocking):
    s = torch.spyre.Stream()
    e = torch.spyre.Event(blocking=blocking)
    with s:
        torch.spyre._sleep(300)
    e.record(s)
    cpu0, wall0 = time.process_time(), time.monotonic()
    e.synchronize()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert wall >= 0.25, wall  # it did wait for the device work
    assert cpu < 0.1, cpu  # process CPU time (all threads): no core was spun
    assert e.query() is True


# ---------------------------------------------------------------- torch.spyre.Event


def test_spyre_event_is_a_torch_event():
    e = torch.spyre.Event()
    assert isinstance(e, torch.Event) and type(e) is torch.spyre.Event
    assert e.device.type == "spyre" and e.device.index is None and e.event_id == 0
    assert repr(e) == "torch.Event device_type=spyre, device_index=-1, event_flag=0, event_id=0"
    # Positional order as torch.cuda.Event: (enable_timing, blocking, interprocess).
    timed = torch.spyre.Event(True, True)
    assert "event_flag=1" in repr(timed)


def test_spyre_event_interprocess_is_not_implemented():
    for make in (lambda: torch.spyre.Event(interprocess=True), lambda: torch.spyre.Event(False, False, True)):
        with pytest.raises(NotImplementedError) as info:
            make()
        assert str(info.value) == (
            "torch.spyre.Event(interprocess=True) is not supported: "
            "Spyre events cannot be shared between processes"
        )


def test_spyre_event_works_with_spyre_streams():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    start, end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    with Gate() as gate:
        gate.block(producer)
        start.record(producer)
        with producer:
            torch.spyre._sleep(50)
        end.record(producer)
        consumer.wait_event(end)
        assert (start.query(), end.query(), consumer.query()) == (False, False, False)
        gate.release()
        consumer.synchronize()
    assert end.query() is True
    assert start.elapsed_time(end) >= 45  # at least the sleep (the window is in the slow tier)


def test_spyre_event_elapsed_time_accepts_any_torch_event():
    # torch.Event.elapsed_time only takes an exact torch.Event argument; the subclass's override
    # runs the same c10 checks for torch.spyre.Event too.
    s = torch.spyre.Stream()
    spyre_start, spyre_end = torch.spyre.Event(enable_timing=True), torch.spyre.Event(enable_timing=True)
    plain_end = torch.Event(device="spyre", enable_timing=True)
    with s:
        spyre_start.record()
        torch.spyre._sleep(20)
        spyre_end.record()
        plain_end.record()
    s.synchronize()
    # at least the sleep, and the later record no earlier (windows are in the slow tier)
    assert 15 <= spyre_start.elapsed_time(spyre_end) <= spyre_start.elapsed_time(plain_end)
    with pytest.raises(ValueError) as info:
        spyre_start.elapsed_time(torch.spyre.Event())
    assert str(info.value) == "Both events must be created with argument 'enable_timing=True'."
    with pytest.raises(TypeError) as info:
        spyre_start.elapsed_time(3)
    assert str(info.value) == "expected end_event to be a torch.Event, got 3 of type int"
    # torch's own checks on exact types, documented in docs/streams.md: not ours to change.
    with pytest.raises(RuntimeError, match="^expected other to be a torch.Event object$"):
        plain_end.elapsed_time(spyre_end)
    with pytest.raises(RuntimeError, match="^expected event to be a torch.Event object$"):
        torch.Stream(device="spyre").record_event(torch.spyre.Event())


def test_spyre_stream_record_event_takes_spyre_events():
    s = torch.spyre.Stream()
    mine = torch.spyre.Event(enable_timing=True)
    assert s.record_event(mine) is mine and mine.device == torch.device("spyre:0")
    made = s.record_event()
    assert type(made) is torch.spyre.Event and made.event_id != 0
    plain = s.record_event(torch.Event(device="spyre"))
    assert type(plain) is torch.Event and plain.device == torch.device("spyre:0")
    with pytest.raises(TypeError, match="^expected a torch.Event, got 3 of type int$"):
        s.record_event(3)


# ---------------------------------------------------------------- openreg stream/event cases (one device)


def test_stream_synchronize():
    # openreg test_stream_synchronize.
    s = torch.Stream(device="spyre")
    assert s.query() is True
    torch.Event().record(s)
    s.synchronize()
    assert s.query() is True


def test_stream_record_event():
    # openreg test_stream_record_event.
    s = torch.Stream(device="spyre")
    e = s.record_event()
    assert e is not None and e.device.type == "spyre"
    s.synchronize()
    assert e.query() is True


def test_stream_wait_event_and_wait_stream_do_not_raise():
    # openreg test_stream_wait_event, test_event_wait_stream and test_stream_wait_stream
    # (same device: one device per process).
    s1, s2 = torch.Stream(device="spyre"), torch.Stream(device="spyre:0")
    s2.wait_event(s1.record_event())
    s2.wait_stream(s1)
    s2.synchronize()
    assert s2.query() is True


def test_event_wait_event():
    # openreg test_event_wait_event.
    s1, s2 = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    e = s1.record_event()
    s2.wait_event(e)
    s2.synchronize()
    assert e.query() is True


def test_event_devices_on_every_kind_of_stream():
    # openreg test_event_different_devices, on the streams of the one device.
    streams = [torch.spyre.default_stream(), torch.spyre.Stream(), torch.spyre.Stream(priority=-1)]
    for s in streams:
        e = torch.Event(device="spyre")
        e.record(s)
        assert e.device.index == 0


def test_multi_stream_sync_patterns():
    # openreg's longer test_multi_stream_sync_patterns with exact values: fan-out, fan-in, pipeline.
    a = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    b = torch.eye(4) * 2
    main, left, right, join = (torch.spyre.Stream() for _ in range(4))
    with main:
        x = a.to("spyre") @ b.to("spyre")
    produced = main.record_event()
    with left:
        left.wait_event(produced)
        row_sums = x.sum(dim=1)
    with right:
        right.wait_event(produced)
        shifted = x + 1
    done_left, done_right = left.record_event(), right.record_event()
    with join:
        join.wait_event(done_left)
        join.wait_event(done_right)
        total = row_sums.sum() + shifted.sum()
    join.synchronize()
    expected_x = a @ b
    assert torch.equal(x.cpu(), expected_x)
    assert torch.equal(row_sums.cpu(), expected_x.sum(dim=1))
    assert torch.equal(shifted.cpu(), expected_x + 1)
    assert total.item() == 2 * expected_x.sum().item() + 16


def test_complex_stream_dependencies():
    # openreg's chain A->B->C->D and diamond, with exact values.
    streams = [torch.spyre.Stream() for _ in range(4)]
    value = spyre_full(1)
    events = [torch.spyre.current_stream().record_event()]  # the fill, on the default stream
    for i, s in enumerate(streams):
        with s:
            s.wait_event(events[-1])
            value = value * 2 + i  # chain: each step needs the previous one
        events.append(s.record_event())
    streams[-1].synchronize()
    assert value.cpu().tolist() == [27.0] * 4  # ((1*2+0)*2+1)*2+2)*2+3
    top, left, right, bottom = (torch.spyre.Stream() for _ in range(4))
    with top:
        base = spyre_full(3)
    e_top = top.record_event()
    with left:
        left.wait_event(e_top)
        l_val = base * 5
    with right:
        right.wait_event(e_top)
        r_val = base + 4
    with bottom:
        bottom.wait_event(left.record_event())
        bottom.wait_event(right.record_event())
        out = l_val - r_val
    bottom.synchronize()
    assert out.cpu().tolist() == [8.0] * 4


# ---------------------------------------------------------------- producer / consumer pipeline


@pytest.mark.races  # reads the pending copies' pinned destinations to show nothing ran
def test_copy_compute_copy_pipeline_honours_every_wait():
    """h2d stream -> compute stream -> d2h stream over 6 chunks with double buffers.

    The h2d stream is gated first, so a compute stream that ignored its wait
    would transpose the -1 sentinels and the results would never match. Buffer
    reuse also needs the reverse waits (h2d waits for compute to have read the
    buffer, compute waits for d2h to have read its output)."""
    chunks, rows, cols = 6, 4, 8
    host_in = [
        (torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + 100 * i).pin_memory()
        for i in range(chunks)
    ]
    host_out = [torch.full((cols, rows), -1.0).pin_memory() for _ in range(chunks)]
    dev_in = [torch.full((rows, cols), -1.0, device="spyre") for _ in range(2)]
    dev_out = [torch.full((cols, rows), -1.0, device="spyre") for _ in range(2)]
    torch.spyre.synchronize()
    h2d, compute, d2h = torch.spyre.Stream(), torch.spyre.Stream(), torch.spyre.Stream()
    loaded, computed, drained = [], [], []
    with Gate() as gate:
        gate.block(h2d)
        for i in range(chunks):
            buf = i % 2
            with h2d:
                if i >= 2:
                    h2d.wait_event(computed[i - 2])  # compute has read dev_in[buf]
                dev_in[buf].copy_(host_in[i], non_blocking=True)
                loaded.append(h2d.record_event())
            with compute:
                compute.wait_event(loaded[i])
                if i >= 2:
                    compute.wait_event(drained[i - 2])  # d2h has read dev_out[buf]
                dev_out[buf].copy_(dev_in[buf].t())  # strided copy: a compute op on the device
                computed.append(compute.record_event())
            with d2h:
                d2h.wait_event(computed[i])
                host_out[i].copy_(dev_out[buf], non_blocking=True)
                drained.append(d2h.record_event())
        # Everything was enqueued without the host waiting, and nothing downstream ran.
        assert (h2d.query(), compute.query(), d2h.query()) == (False, False, False)
        assert [e.query() for e in loaded + computed + drained] == [False] * (3 * chunks)
        assert all(torch.equal(h, torch.full((cols, rows), -1.0)) for h in host_out)
        gate.release()
        d2h.synchronize()
    for i in range(chunks):
        assert torch.equal(host_out[i], host_in[i].t()), i
    assert all(e.query() for e in loaded + computed + drained)
