"""Graph rows (issue 34): a replayed spyre graph against the same work run eagerly on
CPU, and a block compiled with mode="reduce-overhead" on spyre against the same block
compiled on CPU, in the same process (A B A B, medians)."""

import torch

from compiled import forward, make_block
from measure import Row, at_most, interleaved

ADDS = 100


def add_chain(a, b):
    for _ in range(ADDS):
        a + b


def replay(graph):
    graph.replay()
    torch.spyre.synchronize()


def captured_adds(a, b):
    """A graph of ADDS captured `a + b` (each output freed, its block reused in the capture)."""
    add_chain(a, b)  # first calls run once on the host, outside the capture
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())
    graph = torch.accelerator.Graph()
    with s, graph:
        add_chain(a, b)
    return graph


def rows(quick, repeats, selected):
    result = []
    namespace = {"forward": forward, "replay": replay, "add_chain": add_chain}
    if selected("graphs.replay_100_adds"):
        a, b = torch.randn(1 << 10), torch.randn(1 << 10)
        namespace.update(graph=captured_adds(a.to("spyre"), b.to("spyre")), a=a, b=b)
        ours, ref = interleaved("replay(graph)", "add_chain(a, b)", namespace,
                                10 if quick else 100, repeats)
        result.append(Row("graphs.replay_100_adds", ours, ref, "ns", "100 cpu a + b",
                          at_most(0.3)))
    if selected("graphs.transformer_block"):
        (block, x), (cpu_block, cpu_x) = make_block("spyre"), make_block("cpu")
        namespace.update(dev=torch.compile(block, mode="reduce-overhead"), dx=x,
                         cpu=torch.compile(cpu_block), x=cpu_x)
        with torch.no_grad():
            ours, ref = interleaved("forward(dev, dx)", "forward(cpu, x)", namespace,
                                    2 if quick else 20, repeats)
        result.append(Row("graphs.transformer_block", ours, ref, "ns", "compiled on cpu",
                          at_most(1.0)))
    return result
