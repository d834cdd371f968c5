"""Issue 8, faults end to end: an injected stream fault surfaces as a
RuntimeError carrying the runtime's message from synchronize(), query(), the
next blocking copy or a device synchronize, exactly once; the stream stays in
the error state; other streams keep working; torch.spyre reports the state
like upstream (SpyreStreamError, SpyreDeviceState, get_device_state,
stream_get_error, stream_get_error_string).

A latched stream stays latched for the life of the process (and pool ids are
shared round robin), so every fault runs in a fresh interpreter.
"""

import enum
import textwrap

import pytest
import torch

from _helpers import WAIT_UNTIL
from conftest import run_python


def test_enums_match_upstream():
    assert issubclass(torch.spyre.SpyreStreamError, enum.IntEnum)
    assert issubclass(torch.spyre.SpyreDeviceState, enum.IntEnum)
    assert [(e.name, e.value) for e in torch.spyre.SpyreStreamError] == [
        ("Success", 0),
        ("Shutdown", 1),
    ]
    assert [(e.name, e.value) for e in torch.spyre.SpyreDeviceState] == [
        ("Ok", 0),
        ("NotInitialized", 1),
        ("StreamError", 2),
    ]


@pytest.mark.parametrize(
    "error,text",
    [
        (torch.spyre.SpyreStreamError.Success, "Success"),
        (torch.spyre.SpyreStreamError.Shutdown, "Shutdown"),
        (0, "Success"),
        (1, "Shutdown"),
        (2, "Unknown"),  # reserved upstream (HardwareFault)
        (-1, "Unknown"),
        (2**40, "Unknown"),
    ],
)
def test_stream_get_error_string(error, text):
    assert torch.spyre.stream_get_error_string(error) == text


def test_healthy_streams_report_success():
    s = torch.spyre.Stream()
    for stream in (s, torch.spyre.default_stream(), torch.Stream(device="spyre")):
        assert torch.spyre.stream_get_error(stream) is torch.spyre.SpyreStreamError.Success


def test_fault_surfaces_once_from_each_observer_and_latches():
    proc = run_python(
        WAIT_UNTIL + textwrap.dedent("""
        import threading, torch
        from torch_spyre.testing import Gate, inject_fault
        State, Err = torch.spyre.SpyreDeviceState, torch.spyre.SpyreStreamError

        def raised(f):
            try:
                f()
            except RuntimeError as e:
                return str(e)
            return None

        # Not started: reported without starting the runtime.
        assert torch.spyre.get_device_state() is State.NotInitialized
        assert not torch.spyre.is_initialized()
        torch.spyre.init()
        assert torch.spyre.get_device_state() is State.Ok

        # synchronize(): the message once, then the stream is failed for good.
        s, other = torch.spyre.Stream(), torch.spyre.Stream(priority=-1)
        inject_fault(s, "card 3: ECC error at 0x1000")
        assert torch.spyre.get_device_state() is State.Ok     # not run yet
        assert torch.spyre.stream_get_error(s) is Err.Success
        with s:
            torch.spyre._sleep(1)                              # this operation fails
        print(raised(s.synchronize))
        print(raised(s.synchronize), s.query())                # reported once
        assert torch.spyre.stream_get_error(s) is Err.Shutdown
        assert torch.spyre.get_device_state() is State.StreamError   # never cached
        with s:
            print(raised(lambda: torch.spyre._sleep(1)))
            print(raised(lambda: torch.ones(2, device="spyre")))

        # Other streams keep working, values intact.
        with other:
            x = torch.arange(6.0, device="spyre") * 2
            print(x.cpu().tolist(), torch.spyre.stream_get_error(other).name)

        # query(): the message once, then idle.
        q = torch.spyre.Stream()
        inject_fault(q, "query fault")
        with q:
            torch.spyre._sleep(1)
        seen = []

        def idle():
            try:
                return q.query()
            except RuntimeError as e:
                seen.append(str(e))
                return False

        wait_until(idle, what="q to report its fault and go idle")
        print(seen)

        # The next blocking copy on the stream.
        c = torch.spyre.Stream()
        y = torch.full((4,), 7.0, device="spyre")
        torch.spyre.synchronize()
        inject_fault(c, "dma engine hung")
        with c:
            print(raised(y.cpu))
        print(y.cpu().tolist())                                # the default stream is fine

        # A device synchronize reports a failure nobody else did, once.
        d = torch.spyre.Stream(priority=-1)
        inject_fault(d, "device-wide fault")
        with d:
            torch.spyre._sleep(1)
        print(raised(torch.spyre.synchronize), raised(torch.accelerator.synchronize))

        # A fault on an event's record still completes the event: a stream
        # waiting on it is not deadlocked.
        e_stream, waiter = torch.spyre.Stream(), torch.spyre.Stream(priority=-1)
        with Gate() as gate:
            gate.block(e_stream)
            event = torch.Event(device="spyre")
            event.record(e_stream)
            waiter.wait_event(event)
            with waiter:
                z = torch.full((3,), 5.0, device="spyre")
            # the fault must hit the record
            wait_until(lambda: gate.blocked_streams >= 1, what="the gate to run")
            inject_fault(e_stream, "record fault")
        with waiter:
            z_host = z.cpu().tolist()                      # read where z was written
        print(z_host, raised(e_stream.synchronize), event.query())

        print([torch.spyre.stream_get_error(t).name for t in (s, q, c, d, e_stream, other, waiter)])
        """)
    )
    assert proc.stdout.splitlines() == [
        "card 3: ECC error at 0x1000",
        "None True",
        "Cannot schedule operation on stream in error state: card 3: ECC error at 0x1000",
        "Cannot schedule operation on stream in error state: card 3: ECC error at 0x1000",
        "[0.0, 2.0, 4.0, 6.0, 8.0, 10.0] Success",
        "['query fault']",
        "dma engine hung",
        "[7.0, 7.0, 7.0, 7.0]",
        "device-wide fault None",
        "[5.0, 5.0, 5.0] record fault True",
        "['Shutdown', 'Shutdown', 'Shutdown', 'Shutdown', 'Shutdown', 'Success', 'Success']",
    ]
    assert proc.stderr == ""


def test_concurrent_faults_on_many_streams():
    # 8 threads fault 8 streams at once: each sees exactly its own message,
    # once; 8 healthy streams used meanwhile keep exact values.
    proc = run_python(
        WAIT_UNTIL + textwrap.dedent("""
        import threading, torch
        from torch_spyre.testing import Gate, inject_fault
        faulty = [torch.spyre.Stream() for _ in range(8)]
        healthy = [torch.spyre.Stream(priority=-1) for _ in range(8)]
        barrier = threading.Barrier(8)
        out = [None] * 8

        def worker(i):
            messages = []
            barrier.wait()
            with Gate() as gate:
                gate.block(faulty[i])
                # else the fault hits the gate itself
                wait_until(lambda: gate.blocked_streams >= 1, what="the gate to run")
                inject_fault(faulty[i], f"fault {i}")
                with faulty[i]:
                    torch.spyre._sleep(1)
            for _ in range(3):
                try:
                    faulty[i].synchronize()
                except RuntimeError as e:
                    messages.append(str(e))
            with healthy[i]:
                v = (torch.full((16,), float(i), device="spyre") + 1).cpu()
            out[i] = (messages, v.tolist() == [i + 1.0] * 16,
                      torch.spyre.stream_get_error(faulty[i]).name)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        for row in out:
            print(row)
        print(torch.spyre.get_device_state().name)
        """)
    )
    assert proc.stdout.splitlines() == [
        str(([f"fault {i}"], True, "Shutdown")) for i in range(8)
    ] + ["StreamError"]


def test_fault_after_n_operations_from_the_environment():
    proc = run_python(
        """
        import torch
        s = torch.spyre.Stream()
        with s:
            for _ in range(3):
                torch.spyre._sleep(0)     # operations 0, 1, 2 run
        s.synchronize()
        with s:
            torch.spyre._sleep(0)         # operation 3 fails
        try:
            s.synchronize()
        except RuntimeError as e:
            print(e)
        print(torch.spyre.stream_get_error(s).name, torch.spyre.get_device_state().name)
        o = torch.spyre.Stream()          # only one operation fails
        with o:
            print(torch.ones(3, device="spyre").cpu().tolist())
        """,
        env={"FLEX_STUB_FAULT_AFTER": "3"},
    )
    assert proc.stdout.splitlines() == [
        "flex: injected fault (FLEX_STUB_FAULT_AFTER=3)",
        "Shutdown StreamError",
        "[1.0, 1.0, 1.0]",
    ]


def test_device_state_after_free_runtime_is_not_initialized():
    # upstream: NotInitialized whenever no runtime is held.
    proc = run_python(
        """
        import torch
        from torch_spyre.testing import inject_fault
        s = torch.spyre.Stream()
        inject_fault(s, "x")
        with s:
            torch.spyre._sleep(0)
        try:
            s.synchronize()
        except RuntimeError:
            pass
        print(torch.spyre.get_device_state().name)
        torch.spyre._C.free_runtime()
        print(torch.spyre.get_device_state().name, torch.spyre.stream_get_error(s).name)
        """
    )
    assert proc.stdout.split() == ["StreamError", "NotInitialized", "Shutdown"]
