"""Issue 4: StreamPool, SpyreStream, the runtime lifecycle, the guard and the
torch.spyre stream API, as the design note specifies."""

import re
import threading

import pytest
import torch
import torch_spyre
from torch_spyre.testing import Gate

from _helpers import wait_until
from conftest import run_python

# ---------------------------------------------------------------- pool ids


def test_pool_hands_out_ids_round_robin_from_a_fresh_process():
    proc = run_python(
        """
        import torch
        C = torch.spyre._C
        torch.spyre.init()
        assert C._mapped_stream_count() == 5          # the default and host-compute streams
        low = [torch.spyre.Stream().stream_id for _ in range(33)]
        high = [torch.spyre.Stream(priority=-1).stream_id for _ in range(33)]
        positive = torch.spyre.Stream(priority=1).stream_id
        print(low[0], low[31], low[32], high[0], high[31], high[32], positive)
        print(C._mapped_stream_count())
        """
    )
    assert proc.stdout.split() == ["1", "32", "1", "33", "64", "33", "2", "69"]


def test_round_robin_is_exact_under_8_threads():
    proc = run_python(
        """
        import collections, threading, torch
        counts = collections.Counter()
        lock = threading.Lock()
        barrier = threading.Barrier(8)
        def worker(priority):
            barrier.wait()
            ids = [torch.spyre.Stream(priority=priority).stream_id for _ in range(64)]
            with lock:
                counts.update(ids)
        threads = [threading.Thread(target=worker, args=(-(i % 2),)) for i in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        # 4 threads x 64 per pool = 256 hand-outs over 32 ids: exactly 8 each.
        assert sorted(counts) == list(range(1, 65)), sorted(counts)
        assert set(counts.values()) == {8}, counts
        print("ok")
        """
    )
    assert proc.stdout.strip() == "ok"


def test_stream_priority_and_identity():
    low, high = torch.spyre.Stream(), torch.spyre.Stream(priority=-1)
    assert (low.priority, high.priority) == (0, -1)
    assert 1 <= low.stream_id <= 32 and 33 <= high.stream_id <= 64
    assert isinstance(low, torch.Stream) and low.device == torch.device("spyre:0")
    assert torch.spyre.default_stream().stream_id == 0
    assert torch.spyre.default_stream().priority == 0
    modern = torch.Stream(device="spyre", priority=-1)
    assert modern.device_index == 0 and 33 <= modern.stream_id <= 64
    assert torch.Stream(device="spyre") != torch.Stream(device="spyre")
    rebuilt = torch.Stream(stream_id=low.stream_id, device_index=0, device_type=low.device_type)
    assert rebuilt == low and hash(rebuilt) == hash(low)
    assert repr(low) == f"torch.spyre.Stream(device=spyre:0, id={low.stream_id}, priority=0)"
    assert low.native_handle != 0 and low.native_handle == rebuilt.native_handle
    assert low.is_capturing() is False


@pytest.mark.parametrize("device", [None, 0, "spyre", "spyre:0", torch.device("spyre:0")])
def test_stream_device_forms(device):
    s = torch.spyre.Stream(device)
    assert s.device_index == 0 and s.device.type == "spyre"


@pytest.mark.parametrize(
    "kwargs,exc,message",
    [
        ({"device": "cpu"}, ValueError, "expected a spyre device, got 'cpu'"),
        ({"device": torch.device("cpu")}, ValueError, "expected a spyre device, got 'cpu'"),
        ({"device": 1.5}, TypeError, "device must be an int, str, torch.device or None, got 1.5"),
        ({"device": "spyre:x"}, ValueError, "Invalid device string 'spyre:x'"),
        ({"priority": "high"}, TypeError, "priority must be an int, got 'high' of type str"),
        ({"priority": 1.0}, TypeError, "priority must be an int, got 1.0 of type float"),
        ({"priority": True}, TypeError, "priority must be an int, got True of type bool"),
    ],
)
def test_stream_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        torch.spyre.Stream(**kwargs)


def test_unknown_stream_id_is_a_clear_error():
    ghost = torch.Stream(stream_id=999, device_index=0, device_type=torch.spyre.Stream().device_type)
    for op in (ghost.query, ghost.synchronize, lambda: torch.accelerator.set_stream(ghost)):
        with pytest.raises(RuntimeError, match="no flex handle for stream id 999 on spyre:0"):
            op()
    with pytest.raises(RuntimeError, match="no flex handle for stream id 999"):
        with ghost:
            pass
    assert torch.accelerator.current_stream().stream_id == 0


# ---------------------------------------------------------------- per-thread handle cache


def test_threads_resolving_the_same_ids_see_the_same_handles():
    streams = [torch.spyre.default_stream()] + [torch.spyre.Stream(priority=p) for p in (0, -1, 0, -1)]
    expected = [s.native_handle for s in streams]
    assert len(set(expected)) == len(streams) and 0 not in expected
    barrier = threading.Barrier(8)
    seen = [None] * 8

    def resolve(slot):
        barrier.wait()  # all 8 first resolutions (the locked lookups) at once
        first = [s.native_handle for s in streams]
        again = [s.native_handle for s in streams]  # from the thread's cache
        seen[slot] = (first, again)

    threads = [threading.Thread(target=resolve, args=(i,)) for i in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert seen == [(expected, expected)] * 8
    assert [s.native_handle for s in streams] == expected


def test_an_unmapped_id_is_not_cached_and_resolves_once_mapped():
    proc = run_python(
        """
        import threading, torch
        C = torch.spyre._C
        torch.spyre.init()
        late = torch.Stream(stream_id=3, device_index=0, device_type=C._device_type)
        asked, mapped, done = threading.Event(), threading.Event(), threading.Event()
        out = []
        def other():
            for _ in range(2):  # an unknown id raises every time, as before
                try:
                    late.native_handle
                except RuntimeError as e:
                    out.append(str(e).splitlines()[0])
            asked.set(); mapped.wait()
            out.append(late.native_handle)
        t = threading.Thread(target=other); t.start()
        asked.wait()
        handed = [torch.spyre.Stream() for _ in range(3)]  # ids 1, 2, 3: maps id 3
        assert handed[2].stream_id == 3
        mapped.set(); t.join()
        print(out[0]); print(out[1]); print(out[2] == handed[2].native_handle)
        """
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == lines[1]
    assert lines[0].startswith("SpyreStream: no flex handle for stream id 3 on spyre:0")
    assert lines[2] == "True"


def test_a_thread_created_after_free_runtime_resolves_as_before():
    proc = run_python(
        """
        import threading, torch
        C = torch.spyre._C
        streams = [torch.spyre.default_stream(), torch.spyre.Stream(), torch.spyre.Stream(priority=-1)]
        before = [s.native_handle for s in streams]
        C.free_runtime()
        ghost = torch.Stream(stream_id=7, device_index=0, device_type=C._device_type)
        out = {}
        def fresh():  # a new thread: its cache is empty, every first resolve is a lookup
            out["handles"] = [s.native_handle for s in streams]
            with streams[1]:
                torch.spyre._sleep(1)  # a mapped handle keeps working
            streams[1].synchronize()
            out["idle"] = streams[1].query()
            try:
                ghost.query()
            except RuntimeError as e:
                out["ghost"] = str(e).splitlines()[0]
            try:
                torch.spyre.Stream(priority=-1)  # id 34: needs the freed context
            except RuntimeError as e:
                out["new"] = str(e).splitlines()[0]
        t = threading.Thread(target=fresh); t.start(); t.join()
        print(out["handles"] == before, out["idle"])
        print(out["ghost"]); print(out["new"])
        """
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "True True"
    assert lines[1].startswith("SpyreStream: no flex handle for stream id 7 on spyre:0")
    assert lines[2] == (
        "The Spyre runtime was shut down by free_runtime(); restarting it in the same "
        "process is not supported (start a new process)"
    )


# ---------------------------------------------------------------- host-compute streams


def test_host_compute_streams_are_handed_out_round_robin():
    proc = run_python(
        """
        import torch
        C = torch.spyre._C
        ids = [C.host_compute_stream(torch.device("spyre")).id() for _ in range(5)]
        ids += [C.host_compute_stream().id(), C.host_compute_stream(0).id(),
                C.host_compute_stream("spyre:0").id()]
        wrapped = [torch.spyre.host_compute_stream() for _ in range(2)]
        print(ids, [s.stream_id for s in wrapped])
        print(C._num_host_compute_streams(), C._mapped_stream_count())
        s = C.host_compute_stream()
        print(s, s.device(), s.priority(), s == C.host_compute_stream_by_id(s.id()))
        """
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "[65, 66, 67, 68, 65, 66, 67, 68] [65, 66]"
    assert lines[1] == "4 5"  # created with the pool: id 0 and 65-68 are mapped at start
    assert lines[2] == "<torch_spyre._C._SpyreStreamBase device=spyre:0 id=67> spyre:0 0 True"


def test_host_compute_stream_is_a_spyre_stream_with_normal_priority():
    s = torch.spyre.host_compute_stream()
    assert type(s) is torch.spyre.Stream and isinstance(s, torch.Stream)
    assert 65 <= s.stream_id <= 68 and s.device == torch.device("spyre:0") and s.priority == 0
    assert repr(s) == f"torch.spyre.Stream(device=spyre:0, id={s.stream_id}, priority=0)"
    assert torch_spyre._C.host_compute_stream_by_id(s.stream_id).id() == s.stream_id
    assert s.native_handle not in {t.native_handle for t in (torch.spyre.default_stream(), torch.spyre.Stream())}
    x = torch.arange(6.0, device="spyre")
    s.wait_stream(torch.spyre.current_stream())  # x is written on the default stream
    with s:  # ordinary ops queue on it and its memory is stream-ordered
        y = (x * 2).sum()
        assert torch.spyre.current_stream() == s
    s.synchronize()
    assert y.item() == 30.0


def test_host_compute_stream_by_id_and_out_of_range_ids():
    C = torch_spyre._C
    # A tensor of an earlier test used on one of these streams is freed in
    # stream order: the free may still be queued, so query() could say False.
    torch.spyre.synchronize()
    for i in range(65, 69):
        s = C.host_compute_stream_by_id(i, torch.device("spyre:0"))
        assert (s.id(), s.query()) == (i, True)
    for bad in (64, 69, 72, -1, 0):
        with pytest.raises(
            RuntimeError,
            match=rf"host_compute_stream_by_id: stream id {bad} is not a host-compute stream id "
            r"\(expected an id from 65 to 68: 4 host-compute streams",
        ):
            C.host_compute_stream_by_id(bad, torch.device("spyre"))
    with pytest.raises(ValueError, match="expected a spyre device, got cpu"):
        C.host_compute_stream(torch.device("cpu"))
    with pytest.raises(TypeError, match="expected device to be None, an int, a str or a torch.device"):
        C.host_compute_stream(1.5)
    with pytest.raises(RuntimeError, match="Invalid device index 300"):
        C.host_compute_stream(300)


def test_host_compute_stream_synchronize_and_query_wait_for_its_work():
    C = torch_spyre._C
    s = torch.spyre.host_compute_stream()
    native = C.host_compute_stream_by_id(s.stream_id)
    gate = Gate()
    gate.block(s)
    with s:
        torch.spyre._sleep(1)
    assert (native.query(), s.query()) == (False, False)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (native.synchronize(), done.set()))
    waiter.start()
    wait_until(lambda: C._threads_in_host_waits() >= 1, what="the synchronize to wait")
    assert not done.is_set()
    gate.release()
    waiter.join(timeout=30)
    assert done.is_set() and native.query() is True and s.query() is True


def test_device_synchronize_covers_the_host_compute_streams():
    C = torch_spyre._C
    streams = [torch.spyre.Stream._wrap((i, 0)) for i in range(65, 69)]
    gate = Gate()
    for s in streams:
        gate.block(s)
        with s:
            torch.spyre._sleep(5)  # behind the gate: still queued when it opens
    done = threading.Event()
    syncer = threading.Thread(target=lambda: (torch.spyre.synchronize(), done.set()))
    syncer.start()
    wait_until(lambda: C._threads_in_host_waits() >= 1, what="the device synchronize to wait")
    assert not done.is_set()
    gate.release()
    syncer.join(timeout=30)
    assert done.is_set()
    # Returned only once the work behind the gate had run, on every one of them.
    assert [C.host_compute_stream_by_id(s.stream_id).query() for s in streams] == [True] * 4


@pytest.mark.parametrize(
    "value, ids",
    [("1", [65, 65, 65]), ("8", [65, 66, 67, 68, 69, 70, 71, 72, 65]), ("", [65, 66, 67, 68, 65])],
    ids=["1", "8", "empty is the default"],
)
def test_number_of_host_compute_streams_from_the_environment(value, ids):
    proc = run_python(
        f"""
        import torch
        C = torch.spyre._C
        print([C.host_compute_stream().id() for _ in range({len(ids)})])
        n = C._num_host_compute_streams()
        print(n, C._mapped_stream_count())
        for bad in (64, 65 + n):
            try:
                C.host_compute_stream_by_id(bad)
            except RuntimeError as e:
                print(str(e).splitlines()[0])
        """,
        env={"TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS": value},
    )
    lines = proc.stdout.strip().splitlines()
    n = max(ids) - 64
    assert lines[0] == str(ids)
    assert lines[1] == f"{n} {n + 1}"
    for bad, line in zip((64, 65 + n), lines[2:]):
        assert line.startswith(
            f"host_compute_stream_by_id: stream id {bad} is not a host-compute stream id "
            f"(expected an id from 65 to {64 + n}: {n} host-compute streams"
        ), line
    assert len(lines) == 4


@pytest.mark.parametrize("value", ["0", "9", "-1", "abc", "4.5", "4 ", "99999999999999999999"])
def test_bad_number_of_host_compute_streams_is_a_clear_error(value):
    proc = run_python(
        """
        import torch
        for use in (torch.spyre.init, torch.spyre.host_compute_stream, torch.spyre.Stream):
            try:
                use()
                print("no error")
            except RuntimeError as e:
                print(str(e).splitlines()[0])
        print(torch.spyre.is_initialized())
        """,
        env={"TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS": value},
    )
    expected = (
        f"TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS='{value}' is not a valid number of host-compute "
        "streams (expected an integer from 1 to 8; unset, the default is 4)"
    )
    assert proc.stdout.splitlines() == [expected] * 3 + ["False"]


# ---------------------------------------------------------------- current stream


def test_context_managers_switch_and_restore_the_current_stream():
    s1, s2 = torch.spyre.Stream(), torch.spyre.Stream(priority=-1)
    assert torch.spyre.current_stream().stream_id == 0
    with s1:
        assert torch.accelerator.current_stream() == s1
        assert torch.spyre.current_stream() == s1
        with torch.spyre.stream(s2):
            assert torch.spyre.current_stream() == s2
            with s2:  # re-entrant
                assert torch.spyre.current_stream() == s2
            assert torch.spyre.current_stream() == s2
        assert torch.spyre.current_stream() == s1
        with torch.spyre.stream(None):
            assert torch.spyre.current_stream() == s1
    assert torch.spyre.current_stream().stream_id == 0
    assert isinstance(torch.spyre.current_stream(), torch.spyre.Stream)


@pytest.mark.parametrize("enter", ["torch", "spyre"])
def test_context_restores_on_exception(enter):
    s = torch.spyre.Stream()
    with pytest.raises(KeyError):
        with (s if enter == "torch" else torch.spyre.stream(s)):
            assert torch.spyre.current_stream() == s
            raise KeyError("boom")
    assert torch.spyre.current_stream().stream_id == 0


def test_set_stream_forms_interoperate():
    s = torch.spyre.Stream()
    try:
        torch.spyre.set_stream(s)
        assert torch.accelerator.current_stream() == s
        t = torch.Stream(device="spyre")
        torch.accelerator.set_stream(t)
        assert torch.spyre.current_stream() == t
    finally:
        torch.spyre.set_stream(torch.spyre.default_stream())
    with pytest.raises(TypeError, match="expected a torch.Stream, got 3"):
        torch.spyre.set_stream(3)
    with pytest.raises(ValueError, match="expected a spyre stream, got a stream of device cpu"):
        torch.spyre.stream(torch.Stream(device="cpu"))


def test_current_stream_is_per_thread():
    s = torch.spyre.Stream()
    seen = {}
    entered, leave = threading.Event(), threading.Event()

    def other():
        seen["initial"] = torch.spyre.current_stream().stream_id
        with torch.spyre.stream(torch.spyre.Stream(priority=-1)):
            seen["inside"] = torch.spyre.current_stream().priority
            entered.set()
            leave.wait()

    with s:
        t = threading.Thread(target=other)
        t.start()
        entered.wait()
        assert torch.spyre.current_stream() == s  # the other thread's switch is not ours
        leave.set()
        t.join()
    assert seen == {"initial": 0, "inside": -1}


# ---------------------------------------------------------------- asynchrony


def test_stream_work_is_asynchronous_and_ordered():
    s, other = torch.spyre.Stream(), torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        with s:
            torch.spyre._sleep(1)
        assert s.query() is False          # gated: nothing behind the gate ran
        with other:
            torch.spyre._sleep(1)
        other.synchronize()                # other streams are not blocked
        assert other.query() is True
        assert s.query() is False
        gate.release()
        s.synchronize()
    assert s.query() is True


def test_device_synchronize_waits_for_every_stream():
    streams = [torch.spyre.Stream(), torch.spyre.Stream(priority=-1), torch.spyre.default_stream()]
    gate = Gate()
    for s in streams:
        gate.block(s)
    assert [s.query() for s in streams] == [False, False, False]
    done = threading.Event()
    syncer = threading.Thread(target=lambda: (torch.accelerator.synchronize(), done.set()))
    syncer.start()
    # While the device sync is blocked, the pool still hands out streams: the
    # sync holds no lock while it waits.
    handed = [torch.spyre.Stream().stream_id for _ in range(100)]
    assert len(handed) == 100 and not done.is_set()
    gate.release()
    syncer.join(timeout=30)
    assert done.is_set()
    assert [s.query() for s in streams] == [True, True, True]


@pytest.mark.parametrize(
    "sync",
    [
        lambda: torch.spyre.synchronize(),
        lambda: torch.spyre.synchronize(0),
        lambda: torch.spyre.synchronize("spyre:0"),
        lambda: torch.spyre.synchronize(torch.device("spyre:0")),
        lambda: torch.accelerator.synchronize(),
        lambda: torch.accelerator.synchronize(0),
    ],
    ids=["none", "int", "str", "device", "accelerator", "accelerator int"],
)
def test_synchronize_forms(sync):
    s = torch.spyre.Stream()
    with s:
        gate = Gate()
        gate.block()
    assert not s.query()
    waiter = threading.Thread(target=sync)
    waiter.start()
    wait_until(lambda: torch_spyre._C._threads_in_host_waits() >= 1, what="the synchronize to wait")
    assert waiter.is_alive()  # waits for the gated stream
    gate.release()
    waiter.join(timeout=30)
    assert not waiter.is_alive() and s.query()


def test_accelerator_synchronize_works_after_a_cpp_started_runtime():
    proc = run_python(
        """
        import time, torch
        s = torch.Stream(device="spyre")          # starts the runtime from C++
        with s:
            torch.spyre._sleep(200)
        start = time.monotonic()
        torch.accelerator.synchronize()
        print(s.query(), time.monotonic() - start > 0.1)
        """
    )
    assert proc.stdout.split() == ["True", "True"]


def test_runtime_errors_propagate_unwrapped():
    proc = run_python(
        """
        import torch
        torch.spyre._sleep(1)          # the first operation fails
        try:
            torch.spyre.current_stream().synchronize()
        except RuntimeError as e:
            print(e)
        other = torch.spyre.Stream()
        with other:
            torch.spyre._sleep(1)
        other.synchronize()
        print(other.query())
        """,
        env={"FLEX_STUB_FAULT_AFTER": "0"},
    )
    assert proc.stdout.splitlines() == ["flex: injected fault (FLEX_STUB_FAULT_AFTER=0)", "True"]


# ---------------------------------------------------------------- devices and lifecycle


def test_device_guard_restores_the_device():
    proc = run_python(
        """
        import torch
        with torch.accelerator.device_index(1):
            assert torch.accelerator.current_device_index() == 1
        print(torch.accelerator.current_device_index(), torch.spyre.current_device())
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.split() == ["0", "0"]


def test_one_device_per_process():
    proc = run_python(
        """
        import torch
        torch.empty(1, device="spyre")          # binds spyre:0
        for use in (lambda: torch.spyre.Stream(1),
                    lambda: torch.empty(1, device="spyre:1"),
                    lambda: torch.spyre.synchronize(1),
                    lambda: torch.spyre.current_stream(1)):
            try:
                use()
            except RuntimeError as e:
                print(e)
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4
    for line in lines:
        assert line.startswith(
            "Only one Spyre device per process is supported: this process is bound to spyre:0 "
            "but spyre:1 was requested"
        ), line


def test_local_rank_binds_every_thread():
    proc = run_python(
        """
        import threading, torch
        out = []
        def probe():
            out.append((torch.spyre.current_device(), torch.ones(1, device="spyre").device.index,
                        torch.spyre.current_stream().device_index))
        probe()
        t = threading.Thread(target=probe); t.start(); t.join()
        print(out)
        """,
        env={"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"},
    )
    assert proc.stdout.strip() == "[(1, 1, 1), (1, 1, 1)]"


def test_failed_start_reports_bounds_and_can_be_retried():
    proc = run_python(
        """
        import torch
        try:
            torch.spyre.init()
        except RuntimeError as e:
            print(e)
        torch.spyre.set_device(0)
        torch.spyre.init()
        print(torch.spyre.is_initialized(), torch.spyre._C._bound_device())
        """,
        env={"LOCAL_RANK": "8"},  # eight cards are visible: indices 0-7
    )
    first, second = proc.stdout.strip().splitlines()
    assert first == ("Invalid device index 8: out of range for 8 visible Spyre device(s) "
                     "(expected an index in [0, 8))")
    assert second == "True 0"


def test_bad_local_rank_is_a_clear_error():
    proc = run_python(
        """
        import torch
        try:
            torch.spyre.current_device()
        except RuntimeError as e:
            print(e)
        """,
        env={"LOCAL_RANK": "zero"},
    )
    assert "LOCAL_RANK='zero' is not a valid device index" in proc.stdout


def test_free_runtime_keeps_mapped_handles_and_refuses_restart():
    proc = run_python(
        """
        import torch
        C = torch.spyre._C
        s = torch.spyre.Stream()
        x = torch.ones(4, device="spyre")
        C.free_runtime()
        with s:
            torch.spyre._sleep(1)           # a mapped handle keeps working
        s.synchronize(); torch.spyre.synchronize()
        print(s.query(), x.cpu().sum().item())
        for use in (lambda: torch.spyre.Stream(), C.start_runtime,
                    lambda: torch.empty(2, device="spyre")):
            try:
                use()
            except RuntimeError as e:
                print(str(e).splitlines()[0])
        """
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "True 4.0"
    expected = (
        "The Spyre runtime was shut down by free_runtime(); restarting it in the same "
        "process is not supported (start a new process)"
    )
    assert lines[1:] == [expected] * 3


def test_torch_stream_constructor_is_wrapped_only_when_it_is_torchs_own():
    # torch.Stream's tp_new replaced before torch_spyre's import (as another extension could):
    # spyre warns once, naming where that constructor's code is, and leaves it in place.
    proc = run_python("""
        import ctypes, warnings
        import torch
        get_slot = ctypes.pythonapi.PyType_GetSlot
        get_slot.restype, get_slot.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_int]
        TP_NEW = 65  # Py_tp_new
        torchs = get_slot(torch.Stream, TP_NEW)
        (slot,) = [ctypes.c_void_p.from_address(id(torch.Stream) + offset)
                   for offset in range(0, 512, 8)
                   if ctypes.c_void_p.from_address(id(torch.Stream) + offset).value == torchs]
        other = ctypes.cast(ctypes.pythonapi.PyType_GenericNew, ctypes.c_void_p).value
        slot.value = other
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch_spyre
        for w in caught:
            print(w.category.__name__, w.message)
        print(get_slot(torch.Stream, TP_NEW) == other)
        slot.value = torchs  # torch's own again (for the interpreter's exit)
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    warning, left_alone = proc.stdout.splitlines()
    assert re.fullmatch(
        r"RuntimeWarning spyre: torch.Stream's constructor is not torch's own \(its code is in "
        r"\S*(python|libpython)\S*\): spyre leaves it alone, and torch.Stream\(stream_id, "
        r"device_index, device_type\) does not check a spyre device index", warning), warning
    assert left_alone == "True"

