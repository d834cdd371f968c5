"""Issue 34: graph capture on spyre (docs/graphs.md). torch.accelerator.Graph over
at::GraphImplInterface (csrc/graphs/graph.cpp), stream capture in the runtime layer
(csrc/runtime/capture.h), replay as one runtime operation (flex::RuntimeGraph)."""

import gc
import re
import threading

import pytest
import torch

import torch_spyre  # noqa: F401
from _helpers import ROOT, wait_until
from conftest import run_python
from torch_spyre.testing import Gate

pytestmark = pytest.mark.usefixtures("drained_device")

INVALIDATED = "; the capture is invalidated (work launched on its streams raises until capture_end"


def spyre(values, **kwargs):
    return torch.tensor(values, **kwargs).to("spyre")


def test_the_docs_example_prints_what_it_says():
    docs = (ROOT / "docs" / "graphs.md").read_text()
    example = re.findall(r"```python\n(.*?)```", docs, re.S)[0]
    expected = re.findall(r"# (\[.*\])$", example, re.M)
    assert expected == ["[4.0, 4.0]"]
    assert run_python(example).stdout.splitlines() == expected


def test_capture_records_and_replay_runs_each_time():
    x = spyre([0.0, 0.0])
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        assert s.is_capturing()
        x += 1
        y = x * 2
    assert not s.is_capturing()
    # Captured, not run: x is unchanged and y holds nothing computed yet.
    assert x.tolist() == [0.0, 0.0]
    for _ in range(3):
        g.replay()
    assert x.tolist() == [3.0, 3.0]
    assert y.tolist() == [6.0, 6.0]


def test_replay_returns_before_the_work_runs():
    x = spyre([1.0])
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        x.mul_(5)
    with Gate() as gate:
        gate.block()
        g.replay()  # returns at once: the gate holds the stream
        wait_until(lambda: gate.blocked_streams == 1, what="the gate reached")
        assert not torch.spyre.current_stream().query()
        gate.release()
        torch.spyre.current_stream().synchronize()
    assert x.tolist() == [5.0]


def test_replay_on_another_stream_orders_with_it_as_any_op():
    x = spyre([1.0, 2.0])
    capture_stream, replay_stream = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with capture_stream, g:
        x.add_(10)
    with replay_stream:
        with Gate() as gate:
            gate.block()
            g.replay()
            x.mul_(2)  # after the replay, in stream order
            gate.release()
        replay_stream.synchronize()
    assert x.tolist() == [22.0, 24.0]


def test_captured_forward_equals_eager_for_new_inputs():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4)).to("spyre")
    static_input = torch.zeros(5, 8, device="spyre")
    with torch.no_grad():
        model(static_input)  # warm up: first calls run their kernels once on the host
        s = torch.Stream(device="spyre")
        g = torch.accelerator.Graph()
        with s, g:
            static_output = model(static_input)
        for seed in range(3):
            new = torch.randn(5, 8, generator=torch.Generator().manual_seed(seed))
            static_input.copy_(new.to("spyre"))
            g.replay()
            assert torch.equal(static_output.cpu(), model(new.to("spyre")).cpu())


def test_fork_and_join_inside_a_capture():
    x = spyre([1.0, 2.0])
    s, side = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        x.add_(1)
        side.wait_stream(s)  # fork: side joins the capture
        assert side.is_capturing()
        with side:
            z = x * 3
        y = x * 2
        s.wait_stream(side)  # join
        w = y + z
    assert not side.is_capturing()
    g.replay()
    torch.spyre.synchronize()
    assert w.tolist() == [10.0, 15.0]


def test_unjoined_fork_is_refused_at_capture_end():
    x = spyre([1.0])
    s, side = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match=re.escape(
            f"spyre: capture_end: work captured on stream id={side.stream_id} is not joined back "
            f"into the capturing stream id={s.stream_id}")):
        with s, g:
            side.wait_stream(s)
            with side:
                x.add_(1)
    assert not side.is_capturing() and not s.is_capturing()
    assert (x + 1).tolist() == [2.0]


@pytest.mark.parametrize("what, call, message", [
    ("item", lambda x: x.sum().item(),
     "aten::_local_scalar_dense (.item(): the host reads device memory) cannot be captured"),
    ("cpu", lambda x: x.cpu(), "a copy from spyre to cpu (.cpu(), .to('cpu')) cannot be captured"),
    ("h2d", lambda x: torch.ones(2).to("spyre"), "a copy from cpu to spyre cannot be captured"),
    ("stream_synchronize", lambda x: torch.spyre.current_stream().synchronize(),
     "synchronize() of stream id=S is not allowed while it is capturing a graph"),
    ("stream_query", lambda x: torch.spyre.current_stream().query(),
     "query() of stream id=S is not allowed while it is capturing a graph"),
    ("device_synchronize", lambda x: torch.spyre.synchronize(),
     "synchronize() of the device is not allowed while stream id=S is capturing a graph in "
     "capture_error_mode 'global'"),
    ("nonzero", lambda x: torch.nonzero(x),
     "aten::nonzero (it runs at the call: the host waits for the stream and reads its arguments) "
     "cannot be captured"),
    ("randn", lambda x: torch.randn(2, device="spyre"),
     "aten::normal_ (a random op: it draws on the host at the call, so every replay would repeat "
     "the same numbers) cannot be captured"),
    ("dropout", lambda x: torch.nn.functional.dropout(x, 0.5),
     "aten::bernoulli_.float (a random op"),
    ("sleep", lambda x: torch.spyre._sleep(1), "a delay (torch.spyre._sleep) cannot be captured"),
    ("event_query", lambda x: torch.spyre.current_stream().record_event().query(),
     "query() of an event recorded during a capture is not allowed"),
])
def test_what_cannot_be_captured_raises_and_leaves_everything_usable(what, call, message):
    x = spyre([1.0, 2.0])
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    gc.collect()  # earlier tests' garbage is not freed during this one
    allocated = torch.accelerator.memory_allocated()
    with pytest.raises(RuntimeError) as raised:
        with s, g:
            x.add_(1)
            call(x)
    # The refused call's own error, chained under capture_end's.
    original = raised.value.__context__
    expected = message.replace("S", str(s.stream_id))
    assert str(original).startswith("spyre: " + expected), str(original)
    assert INVALIDATED in str(original)
    assert str(raised.value).startswith("spyre: capture_end: the capture was invalidated: " +
                                        expected)
    assert not s.is_capturing()
    # Nothing ran, and device, stream and allocator still work.
    assert x.tolist() == [1.0, 2.0]
    with s:
        assert (x * 2).tolist() == [2.0, 4.0]
    del raised, original  # their tracebacks hold what the refused call made
    gc.collect()
    assert torch.accelerator.memory_allocated() == allocated
    with pytest.raises(RuntimeError, match="spyre graph: replay: nothing was captured"):
        g.replay()
    # The graph captures again after reset().
    g.reset()
    with s, g:
        x.add_(1)
    g.replay()
    assert x.tolist() == [2.0, 3.0]


def test_capture_error_modes_decide_what_other_threads_may_do():
    def other_thread_synchronizes():
        errors = []
        thread = threading.Thread(target=lambda: _record_error(errors, torch.spyre.synchronize))
        thread.start()
        thread.join(timeout=60)
        return errors

    for mode, refused in (("global", True), ("default", True), ("thread_local", False),
                          ("relaxed", False)):
        s = torch.Stream(device="spyre")
        g = torch.accelerator.Graph(capture_error_mode=mode)
        x = spyre([1.0])
        with pytest.raises(RuntimeError) if refused else _nothing():
            with s, g:
                x.add_(1)
                errors = other_thread_synchronizes()
                assert bool(errors) == refused, (mode, errors)
        if refused:
            assert "capture_error_mode 'global'" in errors[0]


def test_relaxed_mode_lets_the_capturing_thread_wait_on_other_streams():
    other = torch.Stream(device="spyre")
    with other:
        done = spyre([4.0]) * 2
    for mode, allowed in (("relaxed", True), ("thread_local", False)):
        s = torch.Stream(device="spyre")
        g = torch.accelerator.Graph(capture_error_mode=mode)
        x = spyre([1.0])
        with pytest.raises(RuntimeError) if not allowed else _nothing():
            with s, g:
                x.add_(1)
                other.synchronize()
        assert done.tolist() == [8.0]
    # The capturing stream itself is never waited on, whatever the mode.
    s = torch.Stream(device="spyre")
    with pytest.raises(RuntimeError, match="capture was invalidated: synchronize.. of stream id="):
        with s, torch.accelerator.Graph(capture_error_mode="relaxed"):
            x.add_(1)
            s.synchronize()


def _record_error(errors, fn):
    try:
        fn()
    except RuntimeError as e:
        errors.append(str(e))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_pool_holds_capture_allocations_until_reset(empty_device):
    x = torch.zeros(256, device="spyre")  # 1 KiB, the common pool
    base_allocated = torch.accelerator.memory_allocated()
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        y = x + 1  # 1 KiB from the graph's private pool
        z = y * 2  # another
        del y  # freed during capture: back to the private pool, its memory stays the graph's
    pool = g.pool()
    assert pool[0] == 0 and pool[1] > 0
    assert torch.accelerator.memory_allocated() == base_allocated + 1024
    reserved = torch.accelerator.memory_reserved()
    torch.accelerator.empty_cache()  # the graph's pool is not given back while the graph holds it
    assert torch.accelerator.memory_reserved() == reserved
    g.replay()
    assert z.cpu()[:2].tolist() == [2.0, 2.0]
    del z
    g.reset()
    torch.accelerator.empty_cache()  # now its segment goes back
    assert torch.accelerator.memory_allocated() == base_allocated
    assert torch.accelerator.memory_reserved() == 2 << 20  # x's segment only


def test_same_sized_reuse_never_crosses_between_a_graphs_pool_and_the_common_pools(empty_device):
    # The allocator hands a just-freed block back to the next allocation of its size
    # on its stream without its lock (docs/tensors.md, "Device allocator"): never
    # into a capture, which allocates from the graph's pool, and never a block of a
    # graph's pool to an allocation outside a capture.
    s = torch.Stream(device="spyre")
    x = torch.zeros(256, device="spyre")
    s.wait_stream(torch.accelerator.current_stream())  # x is read on s
    with s:
        keep = torch.empty(256, device="spyre")  # the capture's empty_cache() keeps the segment
        common = torch.empty(256, device="spyre")
        common_ptr = common.data_ptr()
        g = torch.accelerator.Graph()
        with g:
            del common  # the next 1 KiB allocation on s would take it back, but for the capture
            y = x + 1
        assert y.data_ptr() != common_ptr
        pools = {seg["segment_pool_id"] for seg in torch.spyre.memory._snapshot()["segments"]
                 if seg["address"] <= y.data_ptr() < seg["address"] + seg["total_size"]}
        assert pools == {g.pool()}
        y_ptr = y.data_ptr()
        del y  # back to the graph's pool, not to the common ones
        again = torch.empty(256, device="spyre")
        assert again.data_ptr() == common_ptr
        other = torch.empty(256, device="spyre")
        assert other.data_ptr() != y_ptr
    del again, other, keep
    g.reset()


def test_graphs_share_a_pool(empty_device):
    x = torch.zeros(256, device="spyre")
    s = torch.Stream(device="spyre")
    g1 = torch.accelerator.Graph()
    with s, g1:
        a = x + 1
    g2 = torch.accelerator.Graph(pool=g1.pool())
    with s, g2:
        b = a * 3
    assert g2.pool() == g1.pool()
    # One private segment serves both graphs (plus x's common one).
    assert torch.accelerator.memory_reserved() == 2 * (2 << 20)
    g1.replay()
    g2.replay()
    assert b.cpu()[:2].tolist() == [3.0, 3.0]
    del a, b
    g1.reset()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == 2 * (2 << 20)  # g2 still holds the pool
    g2.reset()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == 2 << 20


def test_keep_graph_instantiates_on_demand():
    x = spyre([1.0])
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph(keep_graph=True)
    with s, g:
        x.add_(2)
    g.instantiate()
    g.replay()
    g.replay()
    assert x.tolist() == [5.0]
    plain = torch.accelerator.Graph()
    with s, plain:
        x.add_(1)
    with pytest.raises(RuntimeError, match=re.escape(
            "spyre graph: instantiate() is for graphs made with keep_graph=True")):
        plain.instantiate()


def test_misuse_is_a_clear_error():
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="spyre graph: capture_end: no capture in progress"):
        g.capture_end()
    with pytest.raises(RuntimeError, match="spyre graph: replay: nothing was captured"):
        g.replay()
    x = spyre([1.0])
    with s, g:
        x.add_(1)
    with pytest.raises(RuntimeError, match="this graph already holds a capture; call reset()"):
        with s:
            g.capture_begin()
    other = torch.accelerator.Graph()
    with s:
        other.capture_begin()
        x.add_(1)
        with pytest.raises(RuntimeError, match=f"stream id={s.stream_id} is already capturing"):
            torch.accelerator.Graph().capture_begin()
    with pytest.raises(RuntimeError, match=re.escape(
            f"spyre graph: capture_end must be called on the stream the capture began on "
            f"(id={s.stream_id}); the current stream is id=0")):
        other.capture_end()
    with s:
        other.capture_end()
    with pytest.warns(UserWarning, match="the captured graph is empty"):
        with s, torch.accelerator.Graph():
            pass


def test_debug_dump_writes_the_captured_operations(tmp_path):
    x = spyre([1.0, 2.0])
    s, side = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    g.enable_debug_mode()
    with s, g:
        x.add_(1)
        side.wait_stream(s)
        with side:
            z = x * 3
        y = x * 2
        s.wait_stream(side)
        w = y + z  # noqa: F841
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    a, b = s.stream_id, side.stream_id
    clusters = {
        a: (f"  subgraph cluster_stream_{a} {{\n"
            f"    label=\"stream id={a}\";\n"
            "    n0 [label=\"0: aten::add_\\n0 bytes\"];\n"
            "    n2 [label=\"2: aten::mul\\n8 bytes\"];\n"
            "    n3 [label=\"3: aten::add\\n8 bytes\"];\n"
            "  }\n"),
        b: (f"  subgraph cluster_stream_{b} {{\n"
            f"    label=\"stream id={b}\";\n"
            "    n1 [label=\"1: aten::mul\\n8 bytes\"];\n"
            "  }\n"),
    }
    # One cluster per stream, in stream id order (the pool's ids wrap around: either may
    # come first, depending on the streams the process made before).
    assert path.read_text() == (
        "digraph spyre_graph {\n"
        "  node [shape=box];\n"
        + "".join(clusters[k] for k in sorted(clusters)) +
        "  n0 -> n1;\n"
        "  n0 -> n2;\n"
        "  n1 -> n3;\n"
        "  n2 -> n3;\n"
        "}\n")
    without = torch.accelerator.Graph()
    with s, without:
        x.add_(1)
    with pytest.raises(RuntimeError, match=re.escape(
            "spyre graph: debug_dump needs debug mode: call enable_debug_mode() before capturing")):
        without.debug_dump(str(path))


def test_copies_and_fills_between_device_tensors_are_captured():
    src = spyre([1.0, 2.0, 3.0])
    dst = torch.zeros(3, device="spyre")
    strided = torch.zeros(3, 2, device="spyre")
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        dst.copy_(src)  # a D2D copy
        src.fill_(7.0)  # a device fill
        strided[:, 1].copy_(dst)  # a strided copy: a compute node
    assert (dst.tolist(), src.tolist()) == ([0.0, 0.0, 0.0], [1.0, 2.0, 3.0])  # not run yet
    g.replay()
    assert dst.tolist() == [1.0, 2.0, 3.0]
    assert src.tolist() == [7.0, 7.0, 7.0]
    assert strided[:, 1].tolist() == [1.0, 2.0, 3.0]
    g.replay()
    assert dst.tolist() == [7.0, 7.0, 7.0]


def test_profiler_shows_each_replayed_op_under_the_replay():
    from torch.profiler import ProfilerActivity, profile

    x = spyre([1.0, 2.0])
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        x.add_(1)
        y = x * 2  # noqa: F841
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        g.replay()
        torch.spyre.synchronize()
    events = {e.name: e for e in prof.events()}
    replay = events["spyre::graph_replay"]
    device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    # The Event Record is the mark the graph's next launch on another stream waits for.
    assert sorted(e.name for e in device) == ["Event Record", "aten::add_ Cmpt Exec",
                                              "aten::mul Cmpt Exec", "spyre graph replay"]
    span = events["spyre graph replay"]
    for name in ("aten::add_ Cmpt Exec", "aten::mul Cmpt Exec"):
        assert span.time_range.start <= events[name].time_range.start
        assert events[name].time_range.end <= span.time_range.end
    # The replay's device time is its ops' (the span is not counted again).
    ops = (events["aten::add_ Cmpt Exec"].device_time_total
           + events["aten::mul Cmpt Exec"].device_time_total)
    assert replay.device_time_total == pytest.approx(ops)


# ---------------------------------------------------------------- compiled code

def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                               torch.nn.Linear(32, 8)).to("spyre")


def _launches(fn):
    """The runtime launches `fn` makes, by name (the profiler's runtime activities)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        fn()
        torch.spyre.synchronize()
    runtime = [e.name for e in prof.events()
               if e.name.startswith(("launch", "aiuLaunch", "aiuDataTransfer"))
               or e.name == "fillAsync"]
    return sorted(runtime)


def test_compiled_kernels_are_captured(fresh_dynamo):
    @torch.compile
    def f(a, b):
        return (a * b).sin() + b

    a, b = spyre([0.5, 1.0]), spyre([2.0, 3.0])
    f(a, b)  # compile and warm up outside the capture
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        out = f(a, b)
    a.copy_(spyre([1.0, 1.0]))
    g.replay()
    assert torch.equal(out.cpu(), (torch.tensor([2.0, 3.0]).sin() + torch.tensor([2.0, 3.0])))


def test_reduce_overhead_replays_one_graph_per_call_and_equals_the_default_mode(fresh_dynamo):
    model = _mlp()
    graphed = torch.compile(model, mode="reduce-overhead")
    plain = torch.compile(model)
    with torch.no_grad():
        for seed in range(3):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed)).to("spyre")
            assert torch.equal(graphed(x).cpu(), plain(x).cpu())
        x = torch.ones(4, 16, device="spyre")
        # After warm-up a call is one copy of the new input into the static one and one
        # graph launch.
        assert _launches(lambda: graphed(x)) == ["launchGraph", "launchOperationD2D"]


def test_reduce_overhead_trains_as_the_default_mode(fresh_dynamo):
    losses = {}
    for mode in ("default", "reduce-overhead"):
        model = _mlp()
        compiled = torch.compile(model, mode=mode)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        losses[mode] = []
        for seed in range(3):
            x = torch.randn(4, 16, generator=torch.Generator().manual_seed(seed)).to("spyre")
            loss = compiled(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses[mode].append(loss.item())
        torch._dynamo.reset()
    assert losses["reduce-overhead"] == losses["default"]


def test_reduce_overhead_runs_what_cannot_be_captured_without_a_graph(fresh_dynamo):
    @torch.compile(mode="reduce-overhead")
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + 1

    x = torch.ones(64, device="spyre")
    f(x)  # the warm-up call runs as compiled; the second call captures
    with pytest.warns(UserWarning, match=r"reduce-overhead'\) on spyre: this graph cannot be "
                                         r"captured, it runs without a spyre graph \(spyre: "):
        out = f(x)
    values = set(out.cpu().tolist())
    assert values <= {1.0, 3.0} and len(values) == 2


def test_torch_cuda_style_helpers():
    x = spyre([1.0])
    g = torch.spyre.Graph()
    assert torch.spyre.Graph is torch.accelerator.Graph
    assert not torch.spyre.is_current_stream_capturing()
    with torch.spyre.graph(g):
        assert torch.spyre.is_current_stream_capturing()
        assert torch.spyre.current_stream() == torch.spyre.graph.default_capture_stream
        x.mul_(3)
    assert not torch.spyre.is_current_stream_capturing()
    assert torch.spyre.current_stream() == torch.spyre.default_stream()
    g.replay()
    g.replay()
    assert x.tolist() == [9.0]
    pool = torch.spyre.graph_pool_handle()
    assert pool[0] == 0 and pool[1] > g.pool()[1]
    shared = torch.spyre.Graph()
    side = torch.spyre.Stream()
    with torch.spyre.graph(shared, pool=pool, stream=side, capture_error_mode="relaxed"):
        assert torch.spyre.current_stream() == side
        y = x + 1
    assert shared.pool() == pool
    shared.replay()
    assert y.tolist() == [10.0]
    with pytest.raises(TypeError, match="torch.spyre.graph: expected a torch.spyre.Graph "
                                        r"\(torch.accelerator.Graph\), got str"):
        torch.spyre.graph("not a graph")


def test_reduce_overhead_follows_changing_scalars(fresh_dynamo):
    """A Python float that changes between calls and a 0-dim CPU tensor argument are read at the
    call by compiled kernels: such graphs must give each call's values, not the captured ones."""

    @torch.compile(mode="reduce-overhead")
    def scaled(x, s):
        return x * s + 1

    @torch.compile(mode="reduce-overhead")
    def times(x, t):
        return x * t

    x = torch.ones(2, device="spyre")
    assert [scaled(x, s).tolist() for s in (2.0, 3.0, 4.0, 5.0)] == [
        [3.0, 3.0], [4.0, 4.0], [5.0, 5.0], [6.0, 6.0]]
    assert [times(x, torch.tensor(v)).tolist() for v in (2.0, 3.0, 4.0)] == [
        [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]


def test_dynamo_reset_frees_reduce_overhead_graphs(fresh_dynamo, empty_device):
    """A reduce-overhead graph lives as long as its compiled function: once dynamo's caches
    let go of it (torch._dynamo.reset()), its pool's memory goes back."""
    model = _mlp()
    graphed = torch.compile(model, mode="reduce-overhead")
    plain = torch.compile(model)
    with torch.no_grad():
        x = torch.ones(4, 16, device="spyre")
        for _ in range(3):
            assert torch.equal(graphed(x).cpu(), plain(x).cpu())
        assert _launches(lambda: graphed(x)) == ["launchGraph", "launchOperationD2D"]
    torch.spyre.synchronize()
    del graphed, plain, x
    torch._dynamo.reset()
    del model
    gc.collect()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == 0
