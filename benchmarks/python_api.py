"""Python rows: the torch / torch.spyre stream API and 64 MiB copies, each
against an in-process reference (a CPU torch.Stream, CPU clone())."""

import torch

from measure import Row, at_most, interleaved

COPY_BYTES = 64 << 20

# row name -> (ours, reference statement, reference name, target, loops: (full, quick))
ROWS = {
    "python.torch_stream": (
        "torch.Stream(device='spyre')", "torch.Stream(device='cpu')", "cpu Stream",
        at_most(1.5), (100_000, 2_000)),
    "python.with_stream": (
        "with spyre_stream: pass", "with cpu_stream: pass", "with cpu Stream",
        at_most(6), (100_000, 2_000)),
    "python.spyre_stream": (
        "torch.spyre.Stream()", "torch.Stream(device='spyre')", "torch.Stream",
        at_most(6), (100_000, 2_000)),
    # Issue 52: waiting for a stream with nothing queued costs what asking it does.
    "python.idle_stream_sync": (
        "idle_stream.synchronize()", "idle_stream.query()", "query()", at_most(1.3),
        (100_000, 2_000)),
    "copy.h2d_64mib": (
        "host.to('spyre'); torch.spyre.synchronize()", "host.clone()", "cpu clone()",
        at_most(2), (5, 1)),
    "copy.d2h_64mib": ("device.cpu()", "host.clone()", "cpu clone()", at_most(2), (5, 1)),
}


def rows(quick, repeats, selected):
    host = torch.rand(COPY_BYTES // 4)
    device = host.to("spyre")
    assert torch.equal(device.cpu(), host), "a 64 MiB round trip through spyre changed the data"
    namespace = {
        "torch": torch,
        "spyre_stream": torch.Stream(device="spyre"),  # not current: `with` switches
        "idle_stream": torch.spyre.Stream(),
        "cpu_stream": torch.Stream(device="cpu"),
        "host": host,
        "device": device,
    }
    result = []
    for name, (ours_stmt, ref_stmt, ref_name, target, (full, short)) in ROWS.items():
        if not selected(name):
            continue
        ours, ref = interleaved(ours_stmt, ref_stmt, namespace, short if quick else full, repeats)
        result.append(Row(name, ours, ref, "ns", ref_name, target))
    return result
