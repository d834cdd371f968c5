"""Graph nodes whose kernel is resolved at capture (csrc/launch/replay_kernel.h): add, sub,
mul and div of tensors replay CPU's structured kernel over an iterator built once; every
other node, and these when an operand would be converted, replay through the boxed call.
Either way a replay computes what CPU's eager op computes on the values in memory at the
replay, bit for bit."""

import threading

import pytest
import torch

import torch_spyre  # noqa: F401
from _helpers import wait_until

pytestmark = pytest.mark.usefixtures("drained_device")

resolved = torch.spyre._C._replay_kernels_resolved


def capture(fn, args):
    """fn(*args) captured into a graph on a side stream: (graph, its result, kernels resolved)."""
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())
    graph = torch.accelerator.Graph()
    before = resolved()
    with s, graph:
        result = fn(*args)
    torch.spyre.current_stream().wait_stream(s)
    return graph, result, resolved() - before


def fresh_values(like, seed):
    g = torch.Generator().manual_seed(seed)
    if like.dtype == torch.bool:
        return torch.randint(0, 2, like.shape, generator=g).bool()
    if like.dtype.is_floating_point:
        return torch.randn(like.shape, generator=g).to(like.dtype)
    return torch.randint(1, 50, like.shape, generator=g).to(like.dtype)


F, I = torch.float32, torch.int32
CASES = [
    # name, fn, argument shapes and dtypes, kernels resolved
    ("add", lambda a, b: a + b, [((1024,), F), ((1024,), F)], 1),
    ("sub", lambda a, b: a - b, [((1024,), F), ((1024,), F)], 1),
    ("mul", lambda a, b: a * b, [((1024,), F), ((1024,), F)], 1),
    ("div", lambda a, b: a / b, [((1024,), F), ((1024,), F)], 1),
    ("add alpha", lambda a, b: torch.add(a, b, alpha=2.5), [((33,), F), ((33,), F)], 1),
    ("sub alpha", lambda a, b: torch.sub(a, b, alpha=3), [((33,), F), ((33,), F)], 1),
    ("add_", lambda a, b: a.add_(b), [((257,), F), ((257,), F)], 1),
    ("sub_ alpha", lambda a, b: a.sub_(b, alpha=2), [((257,), F), ((257,), F)], 1),
    ("mul_", lambda a, b: a.mul_(b), [((257,), F), ((257,), F)], 1),
    ("div_", lambda a, b: a.div_(b), [((257,), F), ((257,), F)], 1),
    ("out=", lambda a, b, c: torch.mul(a, b, out=c), [((64,), F), ((64,), F), ((64,), F)], 1),
    ("int add", lambda a, b: a + b, [((100,), I), ((100,), I)], 1),
    ("int mul_", lambda a, b: a.mul_(b), [((100,), I), ((100,), I)], 1),
    ("int add_ alpha", lambda a, b: a.add_(b, alpha=3), [((100,), I), ((100,), I)], 1),
    ("bool mul", lambda a, b: a * b, [((50,), torch.bool), ((50,), torch.bool)], 1),
    ("broadcast", lambda a, b: a - b, [((4, 8), F), ((1, 8), F)], 1),
    ("0-dim", lambda a, b: a * b, [((16,), F), ((), F)], 1),
    ("python scalar", lambda a: a + 1, [((16,), F)], 1),
    ("transposed", lambda a, b: a.t() / b.t(), [((6, 5), F), ((6, 5), F)], 1),
    ("float64", lambda a, b: a + b, [((16,), torch.float64), ((16,), torch.float64)], 1),
    # An operand converted: the boxed call converts it at each replay.
    ("int div", lambda a, b: a / b, [((100,), I), ((100,), I)], 0),
    ("mixed", lambda a, b: a + b, [((16,), F), ((16,), I)], 0),
    # Not one of the four: the boxed call.
    ("relu", lambda a: torch.relu(a), [((16,), F)], 0),
]


@pytest.mark.parametrize("name,fn,specs,expected", CASES, ids=[c[0] for c in CASES])
def test_a_replay_computes_what_cpu_computes_on_the_values_at_the_replay(name, fn, specs,
                                                                           expected):
    cpu = [torch.zeros(shape, dtype=dtype) for shape, dtype in specs]
    dev = [t.to("spyre") for t in cpu]
    graph, result, made = capture(fn, dev)
    assert made == expected
    for seed in (1, 2, 3):
        for k, (c, d) in enumerate(zip(cpu, dev)):
            c.copy_(fresh_values(c, seed * 10 + k))
            d.copy_(c)
        graph.replay()
        want = fn(*cpu)
        assert result.dtype == want.dtype and result.shape == want.shape
        assert torch.equal(result.cpu(), want), (name, seed)
        assert all(torch.equal(d.cpu(), c) for c, d in zip(cpu, dev)), (name, seed)


def test_a_chain_of_adds_replayed_many_times_adds_up_exactly():
    x = torch.zeros(1000).to("spyre")
    one = torch.ones(1000).to("spyre")
    graph, _, made = capture(lambda: [x.add_(one) for _ in range(100)], [])
    assert made == 100
    for _ in range(7):
        graph.replay()
    assert x.cpu().tolist() == [700.0] * 1000


def test_graphs_replayed_from_two_threads_each_compute_their_own():
    def make(scale):
        a = torch.full((4096,), float(scale)).to("spyre")
        b = torch.full((4096,), 0.5).to("spyre")
        graph, out, made = capture(lambda: (a * b) + a, [])
        assert made == 2
        return graph, out

    graphs = [make(2), make(6)]
    errors = []

    def replay(graph):
        try:
            s = torch.spyre.Stream()
            with s:
                for _ in range(50):
                    graph.replay()
            s.synchronize()
        except Exception as e:  # noqa: BLE001: reported below
            errors.append(e)

    threads = [threading.Thread(target=replay, args=(g,)) for g, _ in graphs]
    for t in threads:
        t.start()
    wait_until(lambda: not any(t.is_alive() for t in threads), timeout=60,
               what="both threads' replays")
    assert errors == []
    torch.spyre.synchronize()
    assert graphs[0][1].cpu().unique().tolist() == [3.0]
    assert graphs[1][1].cpu().unique().tolist() == [9.0]
