"""The peer access window (flex::PeerAccessWindow, docs/flex_stub.md "Peer
access") as spyreccl uses it: a collective's access to device memory as an
operation of a stream (docs/distributed.md, "Streams: direct or staged").
Each test binds the runtime, so each runs in a process of its own."""

import json
import re
import textwrap

from conftest import run_python


def run_json(code):
    return json.loads(run_python(code).stdout.strip().splitlines()[-1])


def test_a_window_opens_in_stream_order_and_holds_its_stream_until_closed():
    out = run_json(
        """
        import json
        import torch
        from torch_spyre.testing import Gate
        s, after = torch.spyre.Stream(), torch.spyre.Stream()
        x = torch.ones(4, device="spyre")
        s.wait_stream(torch.spyre.current_stream())  # x's fill, before anything on s
        w = torch.spyre._C._PeerAccessWindow()
        view = w.view(x)  # what gloo gets: a CPU tensor over the executors' view
        with Gate() as gate:
            gate.block(s)
            w.enqueue(s.stream_id, s.device_index, "spyreccl:allreduce")
            before = w.is_open()  # s is held at the gate, before the window
        opened = w.wait_open()
        view.mul_(3)  # the peer's access, inside the window
        with torch.spyre.stream(s):
            y = x + 1  # queued behind the window: sees the peer's write
        held = [w.is_open(), s.query()]
        w.close()
        w.close()  # twice: harmless
        with torch.spyre.stream(s):
            y = y.cpu().tolist()
        print(json.dumps([str(view.device), before, opened, held, y,
                          w.is_open(), w.why()]))
        """
    )
    assert out == ["cpu", False, True, [True, False], [4.0] * 4, False,
                   "the runtime shut down"]


def test_a_window_that_cannot_open_says_why_and_never_blocks():
    out = run_json(
        """
        import json
        import torch
        import time
        from torch_spyre.testing import Gate, inject_fault
        s = torch.spyre.Stream()
        unqueued = torch.spyre._C._PeerAccessWindow()
        first = [unqueued.wait_open(), unqueued.why()]
        w = torch.spyre._C._PeerAccessWindow()
        with Gate() as gate:
            gate.block(s)
            deadline = time.monotonic() + 30
            while gate.blocked_streams != 1 and time.monotonic() < deadline:
                time.sleep(0.001)
            inject_fault(s, "injected: link down")
            with torch.spyre.stream(s):
                torch.ones(1, device="spyre")  # the fault hits this fill, after the gate
            w.enqueue(s.stream_id, s.device_index, "spyreccl:broadcast")  # queued behind it
        second = [w.wait_open(), w.why()]  # dropped with the stream's queue
        late = torch.spyre._C._PeerAccessWindow()
        try:
            s.synchronize()
        except RuntimeError as e:
            reported = str(e)
        late.enqueue(s.stream_id, s.device_index, "spyreccl:broadcast")  # the stream is failed
        print(json.dumps([first, second, reported, [late.wait_open(), late.why()]]))
        """
    )
    assert out == [
        [False, "the window was never queued"],
        [False, "injected: link down"],
        "injected: link down",
        [False, "Cannot schedule operation on stream in error state: injected: link down"],
    ]


def test_a_window_is_refused_in_a_graph_capture_and_views_refuse_conj():
    out = run_json(
        """
        import json
        import torch
        s = torch.spyre.Stream()
        g = torch.spyre.Graph()
        x = torch.ones(2, device="spyre")
        w = torch.spyre._C._PeerAccessWindow()
        with torch.spyre.stream(s):
            try:
                with torch.spyre.graph(g, stream=s):
                    w.enqueue(s.stream_id, s.device_index, "spyreccl:allreduce")
            except RuntimeError as e:
                refused = str(e).splitlines()[0]
        try:
            w.view(torch.ones(2, dtype=torch.complex64, device="spyre").conj())
        except ValueError as e:
            conj = str(e)
        print(json.dumps([refused, conj]))
        """
    )
    # The refusal invalidates the capture, and its end says why (as for other refusals).
    assert re.fullmatch(r"spyre: capture_end: the capture was invalidated: a collective's peer "
                        r"access window \(spyreccl:allreduce\) cannot be captured: stream id=\d+ "
                        r"is capturing a graph", out[0]), out[0]
    assert out[1] == ("peer access view: expected a tensor without conj/neg bits (resolve_conj(), "
                      "resolve_neg() first)")


def test_a_window_closes_once_another_stream_has_run_what_was_queued_there_before():
    # spyreccl's hold: synchronize() waits for it, and it closes only once the comm stream
    # has run the copies back queued before the close (they are queued after gloo is done,
    # after a synchronize() may have started). A stream that drops the close, or cannot take
    # it, closes the window anyway.
    out = run_json(
        """
        import json
        import time
        import torch
        from torch_spyre.testing import Gate, inject_fault
        held, comm = torch.spyre.Stream(), torch.spyre.Stream()
        w = torch.spyre._C._PeerAccessWindow()
        w.enqueue(held.stream_id, held.device_index, "spyreccl:allreduce:hold")
        x = torch.zeros(4, device="spyre")
        comm.wait_stream(torch.spyre.current_stream())
        with Gate() as gate:
            gate.block(comm)
            with torch.spyre.stream(comm):
                x.fill_(7.0)  # the copy back, queued before the close
            w.close_when_reached(comm.stream_id, comm.device_index, "spyreccl:allreduce:hold")
            before = [w.wait_open(), w.is_open(), held.query()]
        torch.spyre.synchronize()  # waits for the window: for the fill too
        first = [before, w.is_open(), x.cpu().tolist()]
        # The stream meant to close it fails before the close: the close is dropped, and closes.
        dropped = torch.spyre._C._PeerAccessWindow()
        dropped.enqueue(held.stream_id, held.device_index, "spyreccl:broadcast:hold")
        with Gate() as gate:
            gate.block(comm)
            # The fault hits the next operation comm runs: the fill, once comm waits at the gate.
            deadline = time.monotonic() + 60
            while gate.blocked_streams != 1:
                assert time.monotonic() < deadline, "comm never reached the gate"
                time.sleep(0.001)
            inject_fault(comm, "injected: copy back failed")
            with torch.spyre.stream(comm):
                x.fill_(8.0)  # the fault hits this copy back
            dropped.close_when_reached(comm.stream_id, comm.device_index, "hold")
        held.synchronize()
        second = [dropped.is_open(), held.query()]
        try:
            comm.synchronize()
        except RuntimeError as e:
            second.append(str(e))
        refused = torch.spyre._C._PeerAccessWindow()
        refused.enqueue(held.stream_id, held.device_index, "spyreccl:reduce:hold")
        refused.close_when_reached(comm.stream_id, comm.device_index, "hold")  # comm failed
        held.synchronize()
        print(json.dumps([first, second, [refused.is_open(), held.query()]]))
        """
    )
    assert out == [[[True, True, False], False, [7.0] * 4],
                   [False, True, "injected: copy back failed"],
                   [False, True]]


# The progress thread of a group made without torchrun: its collectives' gloo works are
# stand-ins, so this is what the thread does with the windows, not what gloo does.
PROGRESS = """
import json
from datetime import timedelta
import torch
from torch_spyre.testing import Gate
from torch_spyre.distributed import progress as progress_module
from torch_spyre.distributed.progress import _Progress
from torch_spyre.distributed.staging import _Staging

class Done:  # a gloo work that has finished
    def wait(self):
        return True

def error(fn):
    try:
        fn()
    except Exception as e:
        return [type(e).__name__, str(e)]

progress = _Progress(timedelta(seconds=60))
comm = torch.spyre.Stream()
x = torch.ones(4, device="spyre")

def submit(name, staging=None):
    staging = staging or _Staging(direct=True)
    staging(x)  # in place: gloo works inside a window on comm
    return progress.submit(name, staging, [x], lambda: Done(), comm)
"""


def test_a_progress_thread_that_dies_fails_its_collectives_and_closes_their_windows():
    # Before, the windows of the collective in hand and of those queued stayed shut:
    # the comm stream stayed parked and every later synchronize() hung.
    out = run_json(
        PROGRESS
        + textwrap.dedent("""
        class Dying:  # the thread dies at its next use of the lock
            def __enter__(self):
                raise RuntimeError("killed")
            def __exit__(self, *exc):
                return False

        with Gate() as gate:
            gate.block()  # the thread waits for the current stream before the first one
            first, second = submit("allreduce"), submit("broadcast")
            progress._lock = Dying()
        errors = [error(first.wait), error(second.wait)]
        torch.spyre.synchronize()  # returns: no window is left shut
        print(json.dumps([errors, first.is_completed(), second.is_success(),
                          (x * 1).cpu().tolist()]))
        """)
    )
    assert out == [
        [["RuntimeError", "spyreccl: allreduce: the progress thread stopped before completing "
                          "it (RuntimeError: killed)"],
         ["RuntimeError", "spyreccl: broadcast: the progress thread stopped before completing "
                          "it (RuntimeError: killed)"]],
        True, False, [1.0] * 4]


def test_a_collective_that_cannot_be_queued_closes_its_windows():
    # A window queued for a collective that then fails to queue is closed at once, not when
    # (if ever) its reference cycle is collected.
    out = run_json(
        PROGRESS
        + textwrap.dedent("""
        import gc
        gc.disable()
        real = progress_module.SpyreCCLWork
        def refused(*args):
            raise MemoryError("no work")
        progress_module.SpyreCCLWork = refused
        staging = _Staging(direct=True)
        failed = error(lambda: submit("allreduce", staging))
        progress_module.SpyreCCLWork = real
        closed = [staging.window.is_open(), staging.hold.is_open()]
        torch.spyre.synchronize()  # returns: the comm stream is not parked
        after = submit("allreduce")  # the group goes on
        waited = after.wait()
        torch.spyre.synchronize()
        print(json.dumps([failed, closed, waited]))
        """)
    )
    assert out == [["MemoryError", "no work"], [False, False], True]
