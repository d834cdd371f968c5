"""Memory snapshots (docs/tensors.md, "Memory snapshots"): torch.spyre.memory's
_record_memory_history / _snapshot / _dump_snapshot in CUDA's format, read by
torch.cuda._memory_viz unchanged.

Addresses come from data_ptr(), sizes from the allocator's rules (requests round
up to 512 bytes; a small request gets a 2 MiB segment, a 3 MiB one a 20 MiB
segment), stacks from the line that allocated. A free that must wait for another
stream is held with a Gate.
"""

import inspect
import pickle
import re

import pytest
import torch
from torch.cuda import _memory_viz
from torch_spyre.testing import Gate

from _helpers import ROOT
from conftest import run_python

MiB = 1 << 20
memory = torch.spyre.memory


@pytest.fixture
def history(empty_device):
    """History starts empty for the test; it is off again afterwards."""
    yield
    memory._record_memory_history(None)


def here():
    """The caller's frame as snapshots list it: (filename, line of the next line, function)."""
    caller = inspect.currentframe().f_back
    return {"filename": caller.f_code.co_filename, "line": caller.f_lineno + 1,
            "name": caller.f_code.co_name}


def actions(snapshot):
    return [(e["action"], e["addr"], e["size"]) for e in snapshot["device_traces"][0]]


def block_actions(snapshot, addr):
    return [a for a in actions(snapshot) if a[1] == addr and not a[0].startswith("segment")]


def test_snapshot_before_any_allocation_reads_without_starting_the_runtime():
    out = run_python("""
        import torch
        s = torch.spyre.memory._snapshot()
        print(s, torch.spyre.is_initialized())
    """).stdout
    assert out == f"{{'segments': [], 'device_traces': {[[]] * 8}}} False\n"


def test_segments_and_blocks_after_known_allocations(history):
    memory._record_memory_history("all", context="all", stacks="python", clear_history=True)
    where_a = here()
    a = torch.empty(250, device="spyre")  # 1000 bytes: a 1024-byte block of a 2 MiB segment
    where_big = here()
    big = torch.empty(3 * MiB // 4, device="spyre")  # 3 MiB: a large 20 MiB segment
    snapshot = memory._snapshot()
    assert set(snapshot) == {"segments", "device_traces"}
    small, large = sorted(snapshot["segments"], key=lambda s: s["total_size"])
    frames_a = small["blocks"][0].pop("frames")
    assert small.pop("frames") == frames_a  # the segment was allocated for `a`
    assert frames_a[0] == where_a
    assert small == {
        "device": 0, "address": a.data_ptr(), "total_size": 2 * MiB, "allocated_size": 1024,
        "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
        "segment_pool_id": (0, 0), "is_expandable": False,
        "blocks": [
            {"address": a.data_ptr(), "size": 1024, "requested_size": 1000,
             "state": "active_allocated"},
            {"address": a.data_ptr() + 1024, "size": 2 * MiB - 1024, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    }
    frames_big = large["blocks"][0].pop("frames")
    assert frames_big[0] == where_big
    del large["frames"]
    assert large == {
        "device": 0, "address": big.data_ptr(), "total_size": 20 * MiB,
        "allocated_size": 3 * MiB, "active_size": 3 * MiB, "requested_size": 3 * MiB,
        "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
        "blocks": [
            {"address": big.data_ptr(), "size": 3 * MiB, "requested_size": 3 * MiB,
             "state": "active_allocated"},
            {"address": big.data_ptr() + 3 * MiB, "size": 17 * MiB, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    }


def test_side_stream_block_and_a_free_waiting_for_another_stream(history):
    memory._record_memory_history("all", stacks="python", clear_history=True)
    side = torch.spyre.Stream()
    with torch.spyre.stream(side):
        on_side = torch.empty(256, device="spyre")
    t = torch.empty(256, device="spyre")
    ptr = t.data_ptr()
    with Gate() as gate:
        gate.block(side)
        t.record_stream(side)
        del t  # waits for an event on `side`, behind the gate
        segments = {s["stream"]: s for s in memory._snapshot()["segments"]}
        pending_trace = block_actions(memory._snapshot(), ptr)
    assert set(segments) == {0, side.stream_id}
    assert segments[side.stream_id]["blocks"][0]["address"] == on_side.data_ptr()
    assert segments[side.stream_id]["blocks"][0]["state"] == "active_allocated"
    pending = segments[0]["blocks"][0]
    assert (pending["address"], pending["state"]) == (ptr, "active_pending_free")
    assert (segments[0]["allocated_size"], segments[0]["active_size"]) == (0, 1024)
    assert pending_trace == [("alloc", ptr, 1024), ("free_requested", ptr, 1024)]
    side.synchronize()
    torch.empty(256, device="spyre")  # an allocation finds the event complete
    snapshot = memory._snapshot()
    assert block_actions(snapshot, ptr)[2] == ("free_completed", ptr, 1024)
    streams = {(e["action"], e["addr"]): e["stream"] for e in snapshot["device_traces"][0]}
    assert streams[("alloc", on_side.data_ptr())] == side.stream_id
    assert streams[("alloc", ptr)] == 0


def test_trace_records_each_action_in_order_with_its_stack(history):
    memory._record_memory_history("all", context="all", stacks="python", clear_history=True)
    where_a = here()
    a = torch.empty(256, device="spyre")
    b = torch.empty(512, device="spyre")
    where_free = here()
    del b
    del a
    torch.accelerator.empty_cache()
    trace = memory._snapshot()["device_traces"][0]
    base = trace[0]["addr"]
    assert [(e["action"], e["addr"], e["size"], e["stream"]) for e in trace] == [
        ("segment_alloc", base, 2 * MiB, 0),
        ("alloc", base, 1024, 0),
        ("alloc", base + 1024, 2048, 0),
        ("free_requested", base + 1024, 2048, 0),
        ("free_completed", base + 1024, 2048, 0),
        ("free_requested", base, 1024, 0),
        ("free_completed", base, 1024, 0),
        ("segment_free", base, 2 * MiB, 0),
        ("snapshot", 0, 0, 0),
    ]
    assert all(e["pool_id"] == (0, 0) for e in trace)
    times = [e["time_us"] for e in trace]
    assert times == sorted(times) and times[0] > 1.7e15  # microseconds since the epoch
    assert trace[1]["frames"][0] == where_a
    assert trace[3]["frames"][0] == where_free  # context="all": the free's own stack
    assert trace[8]["frames"] == []


@pytest.mark.parametrize("context, alloc_entry, free_entry, block", [
    (None, False, False, False),
    ("state", False, False, True),
    ("alloc", True, "alloc", True),  # a free without a stack of its own shows the allocation's
    ("all", True, "free", True),
])
def test_context_decides_which_stacks_are_kept(history, context, alloc_entry, free_entry, block):
    memory._record_memory_history("all", context=context, stacks="python", clear_history=True)
    where_alloc = here()
    kept = torch.empty(256, device="spyre")
    freed = torch.empty(256, device="spyre")
    where_free = here()
    del freed
    snapshot = memory._snapshot()
    trace = snapshot["device_traces"][0]
    assert [e["action"] for e in trace] == [
        "segment_alloc", "alloc", "alloc", "free_requested", "free_completed", "snapshot"]
    top = lambda frames: frames[0] if frames else None  # noqa: E731
    assert top(trace[1]["frames"]) == (where_alloc if alloc_entry else None)
    expected_free = {False: None, "alloc": {**where_alloc, "line": where_alloc["line"] + 1},
                     "free": where_free}[free_entry]
    assert top(trace[3]["frames"]) == expected_free
    kept_block = snapshot["segments"][0]["blocks"][0]
    assert kept_block["address"] == kept.data_ptr()
    assert top(kept_block["frames"]) == (where_alloc if block else None)


def test_stacks_all_adds_cpp_frames(history):
    memory._record_memory_history("all", stacks="all", clear_history=True)
    t = torch.empty(256, device="spyre")
    frames = memory._snapshot()["segments"][0]["blocks"][0]["frames"]
    names = [f["name"] for f in frames]
    assert "test_stacks_all_adds_cpp_frames" in names
    # From the allocator's entry on: the gathering's own frames are left out.
    assert names[0].startswith("spyre::DeviceCachingAllocator::malloc(")
    assert not any("gather" in name for name in names)
    del t


def test_max_entries_keeps_the_newest_entries(history):
    memory._record_memory_history("all", stacks="python", max_entries=3, clear_history=True)
    ts = [torch.empty(256, device="spyre") for _ in range(4)]
    ptrs = [t.data_ptr() for t in ts]
    # 1 segment_alloc + 4 allocs + the snapshot: the last 3 remain, oldest first.
    assert actions(memory._snapshot()) == [
        ("alloc", ptrs[2], 1024), ("alloc", ptrs[3], 1024), ("snapshot", 0, 4096)]
    assert actions(memory._snapshot()) == [
        ("alloc", ptrs[3], 1024), ("snapshot", 0, 4096), ("snapshot", 0, 4096)]
    memory._record_memory_history("state", stacks="python")  # as CUDA: one entry
    del ts[0]
    assert actions(memory._snapshot()) == [("snapshot", 0, 3072)]


def test_enabled_none_stops_and_drops_the_trace(history):
    memory._record_memory_history("all", stacks="python", clear_history=True)
    where_before = here()
    before = torch.empty(256, device="spyre")
    memory._record_memory_history(None)
    after = torch.empty(256, device="spyre")
    snapshot = memory._snapshot()
    assert snapshot["device_traces"] == [[]] * 8
    blocks = {b["address"]: b for b in snapshot["segments"][0]["blocks"]}
    assert blocks[before.data_ptr()]["frames"][0] == where_before  # kept, as CUDA keeps them
    assert blocks[after.data_ptr()]["frames"] == []
    del before
    assert memory._snapshot()["device_traces"] == [[]] * 8


def test_skip_actions_and_the_legacy_bool_form(history):
    memory._record_memory_history("all", stacks="python", clear_history=True,
                                  skip_actions=["free_requested", "snapshot"])
    t = torch.empty(256, device="spyre")
    ptr = t.data_ptr()
    del t
    assert actions(memory._snapshot()) == [
        ("segment_alloc", ptr, 2 * MiB), ("alloc", ptr, 1024), ("free_completed", ptr, 1024)]
    memory._record_memory_history(True, trace_alloc_max_entries=2, trace_alloc_record_context=True,
                                  clear_history=True)
    where = here()
    t = torch.empty(256, device="spyre")
    trace = memory._snapshot()["device_traces"][0]
    assert [e["action"] for e in trace] == ["alloc", "snapshot"]
    assert where in trace[0]["frames"]
    memory._record_memory_history(False)
    assert memory._snapshot()["device_traces"][0] == []


def test_backward_on_autograds_device_thread_gathers_no_stack(history):
    """Autograd runs spyre's backward ops on its device thread, a C++ thread that has no Python
    thread state: it never takes the GIL for a stack, as the runtime's engine threads never do."""
    memory._record_memory_history("all", stacks="python", clear_history=True)
    w = torch.randn(64, 64, device="spyre", requires_grad=True)
    x = torch.randn(8, 64, device="spyre")
    loss = (x @ w).relu().sum()
    start = len(memory._snapshot()["device_traces"][0])
    loss.backward()
    trace = memory._snapshot()["device_traces"][0][start:]  # after the first snapshot's entries
    seed, *rest = [e for e in trace if e["action"] == "alloc"]
    assert seed["size"] == 4  # backward's seed gradient, made on this thread
    assert "test_backward_on_autograds_device_thread_gathers_no_stack" in [
        f["name"] for f in seed["frames"]]
    grad_alloc = [e for e in rest if e["addr"] == w.grad.data_ptr()]
    assert [(e["size"], e["frames"]) for e in grad_alloc] == [(64 * 64 * 4, [])]


def test_graph_pool_segments_carry_their_pool_id(history):
    memory._record_memory_history("all", stacks="python", clear_history=True)
    x = torch.zeros(256, device="spyre")
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        y = x + 1  # from the graph's private pool
    pool = tuple(g.pool())
    segments = {seg["address"]: seg for seg in memory._snapshot()["segments"]}
    common = [seg for seg in segments.values() if x.data_ptr() in
              [b["address"] for b in seg["blocks"]]]
    private = [seg for seg in segments.values() if y.data_ptr() in
               [b["address"] for b in seg["blocks"]]]
    assert [seg["segment_pool_id"] for seg in common] == [(0, 0)]
    assert [seg["segment_pool_id"] for seg in private] == [pool]
    assert private[0]["stream"] == s.stream_id
    trace = memory._snapshot()["device_traces"][0]
    # The segment's entry and the block's.
    assert [e["pool_id"] for e in trace if e["addr"] == y.data_ptr()] == [pool, pool]
    del y
    g.reset()


def test_dump_snapshot_renders_with_torch_memory_viz(history, tmp_path):
    memory._record_memory_history("all", stacks="python", clear_history=True)
    where = here()
    kept = torch.empty(256, device="spyre")
    freed = torch.empty(512, device="spyre")
    del freed
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    assert [e["action"] for e in snapshot["device_traces"][0]] == [
        "segment_alloc", "alloc", "alloc", "free_requested", "free_completed", "snapshot"]

    identity = lambda lines: lines  # noqa: E731 (no flamegraph.pl download)
    name = f"test_memory_snapshot.py:{where['line']}:{where['name']}"

    def flamegraph_line(lines, prefix):
        """The line of `kept`: its prefix, then its stack outermost first (ending at this test)."""
        [line] = [line for line in lines.splitlines() if line.startswith(prefix + ";active_")]
        assert line.endswith(f";{name} 1024")
        return line

    flamegraph_line(_memory_viz.memory(snapshot, identity), "stream_0")
    flamegraph_line(_memory_viz.segments(snapshot, identity), f"stream_0;seg_{kept.data_ptr()}")
    flamegraph_line(_memory_viz.compare(snapshot["segments"], [], identity),
                    f"only_before;stream_0;seg_{kept.data_ptr()}")
    summary = _memory_viz.segsum(snapshot)
    assert "segments: 1\ntotal_reserved: 2.0MiB\ntotal_allocated: 1.0KiB\n" in summary
    assert _memory_viz.trace(snapshot).startswith(
        f"Device 0 ----------------\n6 entries\na = cudaMalloc({kept.data_ptr()}, 2.0MiB)\n"
        "b = a[0:1.0KiB]\nc = a[1024:2.0KiB]\ndel c # 2.0KiB\n# free completed for c 2.0KiB\n")
    for html, kind in ((_memory_viz.trace_plot(snapshot), "Active Memory Timeline"),
                       (_memory_viz.segment_plot(snapshot), "Allocator State History")):
        assert "MemoryViz.js" in html and f"add_local_files(local_files, '{kind}')" in html
        # The page carries the snapshot itself: the same pickle, base64-encoded.
        import base64
        import json
        start = html.index("const local_files = ") + len("const local_files = ")
        files = json.loads(html[start:html.index("\n", start)])
        assert pickle.loads(base64.b64decode(files[0]["base64"])) == snapshot


def test_bad_arguments_name_the_value():
    cases = [
        (dict(enabled="yes"), "enabled='yes' is not one of 'state', 'all', None"),
        (dict(context="some"), "context='some' is not one of 'state', 'alloc', 'all', None"),
        (dict(stacks="cpp"), "stacks='cpp' is not one of 'python', 'all'"),
        (dict(max_entries=-1), "max_entries=-1 is not an int >= 0"),
        (dict(skip_actions=["malloc"]), "skip_actions entry='malloc' is not one of 'alloc'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(")):
            memory._record_memory_history(**kwargs)
    assert memory._snapshot()["device_traces"][0] == []  # nothing was switched on


def test_exit_with_history_on_and_tensors_alive():
    result = run_python("""
        import torch
        torch.spyre.memory._record_memory_history()
        keep = [torch.ones(1000, device="spyre") for _ in range(3)]
        side = torch.spyre.Stream()
        side.wait_stream(torch.spyre.current_stream())  # keep[0] was made on it
        with torch.spyre.stream(side):
            y = keep[0] * 2
        print(len(torch.spyre.memory._snapshot()["device_traces"][0]))
    """)
    assert result.stdout == "7\n"  # a segment, 3 allocs, y's segment and alloc, the snapshot


def test_the_docs_example_prints_what_it_says():
    text = (ROOT / "docs" / "tensors.md").read_text()
    section = text[text.index("### Memory snapshots"):text.index("## Pinned host memory")]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    printed = re.search(r"```text\n(.*?)```", section, re.S).group(1)

    def normalized(output):  # addresses and times vary; `python -c` names the file <string>
        output = re.sub(r"cudaMalloc\(\d+,", "cudaMalloc(ADDRESS,", output)
        output = re.sub(r"'time_us': \d+", "'time_us': TIME", output)
        return output.replace("<string>:", "example.py:").strip()

    # fresh: the fork server would add its own frame under the example's
    assert normalized(run_python(code, fresh=True).stdout) == normalized(printed)


def test_out_of_memory_is_in_the_trace():
    out = run_python("""
        import torch
        torch.spyre.memory._record_memory_history(stacks="python")
        small = torch.empty(128, device="spyre")  # 512 bytes of a 2 MiB segment
        try:
            torch.empty(300000, device="spyre")  # 1200000 bytes: a 20 MiB segment does not fit
        except torch.OutOfMemoryError:
            pass
        trace = torch.spyre.memory._snapshot()["device_traces"][0]
        for e in trace:
            print(e["action"], e.get("addr", e.get("device_free")), e["size"], e["stream"],
                  e["frames"][0]["line"] if e["frames"] else None)
    """, env={"FLEX_STUB_MEMORY_BYTES": str(4 << 20)}).stdout.splitlines()
    assert [line.split()[0] for line in out] == ["segment_alloc", "alloc", "oom", "snapshot"]
    action, device_free, size, stream, line = out[2].split()
    # As CUDA: the free device bytes, and the request rounded as the allocator rounds it.
    assert (device_free, size, stream, line) == (str(2 << 20), "1200128", "0", "6")


def test_threads_allocate_free_and_snapshot_at_once(history):
    """Stacks are gathered (taking the GIL) before the allocator's lock, never under it."""
    import threading

    memory._record_memory_history("all", context="all", stacks="python", clear_history=True)

    def churn():
        for _ in range(200):
            t = torch.empty(256, device="spyre")
            del t

    threads = [threading.Thread(target=churn) for _ in range(3)]
    for thread in threads:
        thread.start()
    snapshots = [memory._snapshot() for _ in range(20)]
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    trace = memory._snapshot()["device_traces"][0]
    counts = {a: sum(e["action"] == a for e in trace) for a in ("alloc", "free_completed")}
    assert counts == {"alloc": 600, "free_completed": 600}
    assert all(e["frames"] and e["frames"][0]["name"] == "churn"
               for e in trace if e["action"] in ("alloc", "free_requested"))
    assert len(snapshots) == 20
