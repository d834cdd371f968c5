"""The peer access window (flex::PeerAccessWindow, docs/flex_stub.md "Peer
access") as spyreccl uses it: a collective's access to device memory as an
operation of a stream (docs/distributed.md, "Streams: direct or staged").
Each test binds the runtime, so each runs in a process of its own."""

import json
import re

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
