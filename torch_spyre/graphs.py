"""Graphs on spyre (docs/graphs.md): torch.cuda's graph helpers for
`torch.accelerator.Graph`, which spyre implements (csrc/graphs/graph.cpp).

    g = torch.spyre.Graph()                # torch.accelerator.Graph
    with torch.spyre.graph(g):             # captures on a side stream, as torch.cuda.graph
        y = model(static_x)
    static_x.copy_(x); g.replay()          # one launch on the current stream
"""

import gc

import torch

from . import _C

__all__ = ["Graph", "graph", "graph_pool_handle", "is_current_stream_capturing"]

Graph = torch.accelerator.Graph


def graph_pool_handle() -> tuple:
    """A new private memory pool id: graphs captured with `pool=` the same id share
    their memory (replay them in the order they were captured)."""
    return _C._graph_pool_handle()


def is_current_stream_capturing() -> bool:
    """True while the current spyre stream is capturing a graph."""
    return torch.spyre.current_stream().is_capturing()


class graph:
    """Captures the work of its body into `spyre_graph` (a `torch.spyre.Graph`), as
    `torch.cuda.graph` does: the device is synchronized and the cache emptied first,
    and the capture runs on `stream` (default: one side stream shared by every
    `torch.spyre.graph`). `pool` and `capture_error_mode` (default "global") set the
    graph's, as `torch.accelerator.Graph`'s arguments do."""

    default_capture_stream = None

    def __init__(self, spyre_graph, pool=None, stream=None, capture_error_mode="global"):
        if not isinstance(spyre_graph, Graph):
            raise TypeError("torch.spyre.graph: expected a torch.spyre.Graph "
                            f"(torch.accelerator.Graph), got {type(spyre_graph).__name__}")
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = torch.spyre.Stream()
            stream = graph.default_capture_stream
        self.spyre_graph = spyre_graph
        self.capture_stream = stream
        spyre_graph.capture_error_mode = capture_error_mode
        if pool is not None:
            spyre_graph.graph_pool = pool

    def __enter__(self):
        torch.spyre.synchronize()
        if torch.compiler.config.force_cudagraph_gc:
            gc.collect()
        torch.spyre.empty_cache()
        self.stream_context = torch.spyre.stream(self.capture_stream)
        self.stream_context.__enter__()
        try:
            self.spyre_graph.capture_begin()
        except BaseException:
            self.stream_context.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info):
        try:
            self.spyre_graph.capture_end()
        finally:
            self.stream_context.__exit__(*exc_info)
