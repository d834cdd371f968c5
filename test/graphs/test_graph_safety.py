"""Graph capture and replay that cannot corrupt a program (docs/graphs.md): refusals that leave
nothing queued, replays ordered behind the same graph's earlier ones, sticky invalidation,
inputs kept alive by the graph, pool ids checked, replays seen by the sanitizer."""

import re
import threading

import pytest
import torch

import torch_spyre  # noqa: F401
from _helpers import wait_until
from conftest import run_python
from torch_spyre.testing import Gate

pytestmark = pytest.mark.usefixtures("drained_device")

# Host buffers a stray write or read after munmap() kills the process with: a refused copy
# that still ran later would crash the subprocess instead of passing silently.
MAPPED = """
import ctypes, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

def mapped(n):
    ptr = libc.mmap(None, 4 * n, mmap.PROT_READ | mmap.PROT_WRITE,
                    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert ptr not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
    return ptr, torch.frombuffer((ctypes.c_float * n).from_address(ptr), dtype=torch.float32)

def unmap(ptr, n):
    assert libc.munmap(ptr, 4 * n) == 0
"""


def test_a_refused_copy_queues_nothing_and_never_touches_the_callers_memory():
    # Global mode refuses every host wait while a capture is in progress. A blocking copy on a
    # busy stream is refused before it is queued: the caller frees its buffer right after the
    # call raised, the stream then runs, and nothing lands in (or is read from) that memory.
    result = run_python(MAPPED + """
import threading
import torch, torch_spyre
from torch_spyre.testing import Gate, launched_ops

N = 1 << 16
big = torch.full((N,), 7.0, device="spyre")
default = torch.spyre.current_stream()
s = torch.spyre.Stream()
kept_ptr, kept = mapped(N)
kept.fill_(3.0)

def refused(call):
    g = torch.accelerator.Graph()
    with torch.spyre.stream(s):
        g.capture_begin()
    before = launched_ops(default)
    try:
        call()
    except RuntimeError as e:
        error = str(e)
    else:
        error = None
    queued = launched_ops(default) - before
    with torch.spyre.stream(s):
        try:
            g.capture_end()
        except RuntimeError as e:
            assert str(e).startswith("spyre: capture_end: the capture was invalidated: "), str(e)
    return queued, error

def item_from_another_thread():
    errors = []
    def run():
        try:
            big[5].item()
        except RuntimeError as e:
            errors.append(str(e))
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    raise RuntimeError(errors[0])

gate = Gate()
gate.block(default)  # the stream is busy: whatever is queued stays queued
print(refused(lambda: kept.copy_(big)))
freed_ptr, freed = mapped(N)
print(refused(lambda: freed.copy_(big)))
unmap(freed_ptr, N)
del freed
source_ptr, source = mapped(N)
source.fill_(1.0)
print(refused(lambda: big.copy_(source)))
unmap(source_ptr, N)
del source
print(refused(item_from_another_thread))
gate.release()
torch.spyre.synchronize()
print(kept.eq(3.0).all().item(), big.eq(7.0).all().item(), (big[:2] * 2).tolist())
""")
    lines = result.stdout.splitlines()
    assert len(lines) == 5, result.stdout + result.stderr
    tail = (" is not allowed while stream id=S is capturing a graph in capture_error_mode 'global'"
            " ('relaxed' allows host waits on other streams)")
    whats = ["a copy from spyre to cpu (.cpu(), .to('cpu')) (the host waits for stream id=0)",
             "a copy from spyre to cpu (.cpu(), .to('cpu')) (the host waits for stream id=0)",
             "a copy from cpu to spyre (the host waits for stream id=0)",
             "aten::_local_scalar_dense (.item(): the host reads device memory) (the host waits "
             "for stream id=0)"]
    for line, what in zip(lines, whats):
        queued, error = eval(line)  # noqa: S307 (our own subprocess's tuple)
        assert queued == 0, line
        assert re.sub(r"stream id=\d+ is capturing", "stream id=S is capturing", error).startswith(
            "spyre: " + what + tail), error
    assert lines[4] == "True True [14.0, 14.0]"


def test_replays_on_two_streams_run_one_after_the_other():
    # cudaGraphLaunch orders each launch of a graph after its previous ones, whatever the
    # streams: both replays read and write x, so each must see the other's 20 steps. (Big
    # enough that two replays run at once would overlap for milliseconds.)
    x = torch.zeros(1 << 20, device="spyre")
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()
    with s, g:
        for _ in range(20):
            t = x + 1
            x.copy_(t)
    a, b = torch.Stream(device="spyre"), torch.Stream(device="spyre")
    for first, second, expected in ((a, b, 40.0), (b, a, 80.0)):
        with Gate() as gate:
            gate.block(first)
            gate.block(second)
            with first:
                g.replay()
            with second:
                g.replay()
            wait_until(lambda: gate.blocked_streams == 2, what="both streams at the gate")
        torch.spyre.synchronize()
        assert x.unique().tolist() == [expected]


def _error_of(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def _in_another_thread(fn):
    result = []
    thread = threading.Thread(target=lambda: result.append(_error_of(fn)))
    thread.start()
    thread.join(timeout=60)
    assert result, "the thread did not finish"
    return result[0]


def test_an_invalidated_capture_runs_nothing_until_capture_end():
    x = torch.tensor([1.0, 2.0]).to("spyre")
    y = torch.tensor([5.0, 6.0]).to("spyre")
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph()  # capture_error_mode "global"
    why = (f"synchronize() of the device is not allowed while stream id={s.stream_id} is capturing "
           "a graph in capture_error_mode 'global' ('relaxed' allows host waits on other streams)")
    with s:
        g.capture_begin()
        x.add_(1)  # recorded
        # Another thread's refused wait invalidates the capture...
        assert _in_another_thread(torch.spyre.synchronize) == (
            f"spyre: {why}; the capture is invalidated (work launched on its streams raises until "
            "capture_end, which raises too; the graph holds nothing: capture again)")
        # ... which stays invalidated: the capturing stream runs nothing, whatever is launched.
        assert s.is_capturing()
        for launch, what in ((lambda: x.add_(10), "aten::add_"), (lambda: x.add_(100), "aten::add_"),
                             (lambda: x.copy_(y), "a device-to-device copy"),
                             (lambda: x.fill_(7.0), "a fill"),
                             (lambda: s.record_event(), "an event record"),
                             (lambda: x[0].item(),
                              "aten::_local_scalar_dense (.item(): the host reads device memory)"),
                             (lambda: s.synchronize(), "synchronize()")):
            assert _error_of(launch) == (
                f"spyre: {what} on stream id={s.stream_id} cannot run: the stream's capture was "
                f"invalidated ({why}); nothing runs on it until capture_end, which raises"), what
        # Other threads' waits are not refused by a capture that records nothing more.
        assert _in_another_thread(torch.spyre.synchronize) is None
        assert _error_of(g.capture_end) == f"spyre: capture_end: the capture was invalidated: {why}"
    assert not s.is_capturing()
    assert x.tolist() == [1.0, 2.0]
    with s:
        assert (x + 1).tolist() == [2.0, 3.0]  # the stream works again
    g.reset()
    with s, g:
        x.add_(1)
    g.replay()
    assert x.tolist() == [2.0, 3.0]


@pytest.mark.parametrize("pool", [(5, 7), (3, 0), (0, 1 << 40)])
def test_a_pool_id_no_graph_made_is_refused(pool):
    s = torch.Stream(device="spyre")
    g = torch.accelerator.Graph(pool=pool)
    with pytest.raises(ValueError, match=re.escape(
            f"spyre graph: capture_begin: pool {pool} was made by no graph: expected another "
            "graph's g.pool() or torch.spyre.graph_pool_handle() (or None for a pool of its own)")):
        with s, g:
            pass
    assert not s.is_capturing()
    # The ids a graph or graph_pool_handle() made are accepted.
    x = torch.zeros(2, device="spyre")
    first = torch.accelerator.Graph(pool=torch.spyre.graph_pool_handle())
    with s, first:
        x.add_(1)
    second = torch.accelerator.Graph(pool=first.pool())
    with s, second:
        x.add_(2)
    assert second.pool() == first.pool()
    first.replay()
    second.replay()
    assert x.tolist() == [3.0, 3.0]


def test_a_graph_keeps_its_inputs_memory_until_reset():
    # The program drops the graph's input and empties the cache: the graph still holds the
    # input's block (counted as allocated), so a replay reads the input's last values, never
    # freed or reused memory. reset() lets it go.
    result = run_python("""
import gc
import torch, torch_spyre
x = torch.full((1 << 18,), 3.0, device="spyre")  # 1 MiB: a segment of its own
s = torch.spyre.Stream()
g = torch.accelerator.Graph()
with torch.spyre.stream(s), g:
    y = x * 2  # y: the graph's pool
allocated = torch.accelerator.memory_allocated()
del x
gc.collect()
torch.accelerator.empty_cache()
print(torch.accelerator.memory_allocated() == allocated)
z = torch.full((1 << 18,), 9.0, device="spyre")  # cannot take x's block
g.replay()
print(y[:2].tolist(), y.eq(6.0).all().item(), z[:2].tolist())
del y, z
g.reset()
gc.collect()
torch.accelerator.empty_cache()
print(torch.accelerator.memory_allocated(), torch.accelerator.memory_reserved())
""")
    assert result.stdout.splitlines() == ["True", "[6.0, 6.0] True [9.0, 9.0]", "0 0"], result.stderr


def test_the_sanitizer_checks_each_replayed_node_as_launched(own_sanitizer_mode):
    from torch_spyre.sanitizer import UnsynchronizedAccessError

    x = torch.ones(4, device="spyre")
    s, a, b = (torch.spyre.Stream() for _ in range(3))
    g = torch.accelerator.Graph()
    with s, g:
        x.add_(1)
    torch.spyre.synchronize()
    torch.spyre.sanitizer.enable()
    with a:
        g.replay()
    with b:
        g.replay()  # ordered after the replay on a: no report
    a.wait_stream(b)
    with a:
        w = x * 5
    with b:
        with pytest.raises(UnsynchronizedAccessError) as raised:
            g.replay()  # writes x, which a's read is not ordered before
    lines = str(raised.value).splitlines()
    assert lines[:3] == [
        "spyre sanitizer: unsynchronized access (write-after-read)",
        f"  this access:    aten::add_.Tensor (in a graph replay) writes tensor float32[4] on {b!r}",
        f"  earlier access: aten::mul.Tensor reads tensor float32[4] on {a!r}, not ordered before it",
    ]
    b.wait_stream(a)
    with b:
        g.replay()  # ordered now: no report
    torch.spyre.sanitizer.disable()
    torch.spyre.synchronize()
    # The refused replay queued nothing.
    assert x.tolist() == [4.0] * 4
    assert w.tolist() == [15.0] * 4


def test_the_hazard_tracker_orders_a_replay_after_what_it_races_with():
    result = run_python("""
import torch, torch_spyre
from torch_spyre import _C
from torch_spyre.testing import Gate
x = torch.full((1024,), 1.0, device="spyre")
s = torch.spyre.Stream()
g = torch.accelerator.Graph()
with torch.spyre.stream(s), g:
    x.add_(10)
torch.spyre.synchronize()
a = torch.spyre.Stream()
with Gate() as gate:
    gate.block(a)
    with torch.spyre.stream(a):
        y = x * 2          # held by the gate
    g.replay()             # writes x: ordered after the held read instead of racing with it
    print(torch.spyre.current_stream().query(), _C._sanitizer_ordering_waits())
print(y.cpu().unique().tolist(), x.cpu().unique().tolist())
""", env={"SPYRE_HAZARD_TRACKER": "1", "TORCH_SPYRE_SANITIZER": ""})
    assert result.stdout.splitlines() == ["False 1", "[2.0] [11.0]"], result.stderr


@pytest.mark.slow  # 300 captures beside a launching thread (44 s at load average 15)
def test_a_stream_joining_a_capture_while_another_thread_launches_on_it():
    # One thread launches ops (new outputs: allocations too) on s without pause; the other
    # makes s join its captures and join back, replays each graph twice and resets it (its
    # pool goes). Each of s's ops is captured or queued as a whole: no crash, no internal
    # assert, the capturing thread's own work applied twice per graph.
    result = run_python("""
        import sys, threading, torch, torch_spyre
        sys.setswitchinterval(1e-6)  # switch threads as often as Python can
        s, origin = torch.spyre.Stream(), torch.spyre.Stream()
        a = torch.ones(256, device="spyre")
        counter = torch.zeros(1, device="spyre")
        a.add_(0); counter.add_(0)  # warm up: first calls run at the call
        (a + 1).mul_(2)
        torch.spyre.synchronize()
        stop = threading.Event()
        launched = [0]

        def launch():
            with torch.spyre.stream(s):
                while not stop.is_set():
                    b = a + 1
                    b.mul_(2)
                    launched[0] += 1

        thread = threading.Thread(target=launch)
        thread.start()
        ended = unjoined = 0
        for _ in range(300):
            g = torch.accelerator.Graph(capture_error_mode="relaxed")
            with torch.spyre.stream(origin):
                g.capture_begin()
                counter.add_(1)
                fork = torch.Event(device="spyre")
                fork.record(origin)
                s.wait_event(fork)
                join = torch.Event(device="spyre")
                join.record(s)
                origin.wait_event(join)
                try:
                    g.capture_end()
                except RuntimeError as e:
                    assert "is not joined back into the capturing stream" in str(e), e
                    unjoined += 1
                    continue
                ended += 1
                g.replay()
                g.replay()
            origin.synchronize()
            g.reset()
        stop.set()
        thread.join()
        torch.spyre.synchronize()
        print(ended + unjoined, launched[0] > 0, counter.item() == 2 * ended)
    """, timeout=240)
    assert result.stdout.splitlines() == ["300 True True"]
    assert result.stderr == ""
