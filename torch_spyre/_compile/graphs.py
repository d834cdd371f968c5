"""`torch.compile(mode="reduce-overhead")` on spyre: each compiled graph replays as a
spyre graph (docs/graphs.md, "reduce-overhead").

Inductor 2.13 wraps compiled graphs in CUDA graphs only for CUDA: its check of a
graph's devices (`cudagraph_utils.check_multiple_devices_or_any_cpu_nodes`) gives
every other device a reason to skip, and its wrapper (`compile_fx.cudagraphify`)
uses `torch.cuda`. Inductor's pluggable `config.cudagraph_policy` decides how a
compiled graph is wrapped; spyre installs one whose graphs on spyre are recorded
with `torch.accelerator.Graph`, and which leaves every other device to inductor's
default, and makes the device check accept a graph whose only device is spyre.

The policy, per compiled graph (as inductor's non-tree `cudagraphify_impl`):
  - first call: inputs that are not static (parameters and buffers are) get
    static copies; one warm-up run on a side stream; then the graph is captured
    on that stream (capture_error_mode "thread_local");
  - every call: the new inputs are copied into the static ones, the graph is
    replayed on the current stream (one launch), and the graph's static outputs
    are returned, which the next call overwrites, as CUDA graphs' are (clone what
    you keep across calls). A training forward's saved activations are such
    outputs, and AOT autograd's backward graph takes them as static inputs: run
    each forward's backward before the next forward of the same graph;
  - a graph that cannot be captured (a random op, an op that runs at the call,
    a host read) runs as compiled without a graph, with a warning naming why.
"""

import threading
import warnings

import torch

_installed = False
_lock = threading.Lock()


def _is_spyre_graph(example_inputs):
    return any(isinstance(t, torch.Tensor) and t.device.type == "spyre" for t in example_inputs)


class Graphified:
    """`model` (a boxed compiled callable: it takes a list and clears it) replayed as a
    spyre graph, recorded at its first call on each thread (as inductor's cudagraphify)."""

    def __init__(self, model, static_input_idxs):
        self.model = model
        self.static_input_idxs = frozenset(static_input_idxs)
        self.threads = threading.local()

    def __call__(self, new_inputs):
        replay = getattr(self.threads, "replay", None)
        if replay is None:
            replay = self.threads.replay = _record(self.model, new_inputs, self.static_input_idxs)
        return replay(new_inputs)



def _record(model, inputs, static_input_idxs):
    from torch._inductor.compile_fx import (
        get_expanded_dims,
        index_expanded_dims_and_copy_,
        static_input,
    )

    copied = [i for i, x in enumerate(inputs)
              if isinstance(x, torch.Tensor) and i not in static_input_idxs]
    expanded = {i: get_expanded_dims(inputs[i]) for i in copied}
    static_inputs = list(inputs)
    for i in copied:
        static_inputs[i] = static_input(inputs[i])
        index_expanded_dims_and_copy_(static_inputs[i], inputs[i], expanded[i])
    for i in static_input_idxs:
        if isinstance(inputs[i], torch.Tensor):
            static_inputs[i] = inputs[i].detach()

    # Warm up on a side stream (first calls may run at the call: verification,
    # allocator growth), then capture there.
    current = torch.spyre.current_stream()
    side = torch.spyre.Stream()
    side.wait_stream(current)
    with torch.spyre.stream(side):
        model(list(static_inputs))
    current.wait_stream(side)

    graph = torch.accelerator.Graph(capture_error_mode="thread_local")
    try:
        with side, graph:
            static_outputs = model(list(static_inputs))
    except RuntimeError as error:
        reason = str(error.__context__ or error).splitlines()[0]
        warnings.warn(f"torch.compile(mode='reduce-overhead') on spyre: this graph cannot be "
                      f"captured, it runs without a spyre graph ({reason})", stacklevel=2)
        torch.spyre.synchronize()
        return model
    if not isinstance(static_outputs, (list, tuple)):
        static_outputs = (static_outputs,)
    static_outputs = list(static_outputs)

    def replay(new_inputs):
        for i in copied:
            index_expanded_dims_and_copy_(static_inputs[i], new_inputs[i], expanded[i])
        new_inputs.clear()
        graph.replay()
        return static_outputs

    return replay


def install(cudagraph_utils):
    """Installs the policy once inductor's `cudagraph_utils` is imported (before any graph is
    compiled or loaded from inductor's cache), unless a policy is already set or CUDA is
    present (a policy changes how inductor wraps CUDA graphs too: there, reduce-overhead
    keeps inductor's own CUDA graph trees)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    from torch._inductor import config

    if config.cudagraph_policy is not None or torch.cuda.is_available():
        return

    class SpyreGraphPolicy(cudagraph_utils.CUDAGraphPolicy):
        """Spyre graphs for spyre graphs; inductor's default for every other device."""

        def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index,
                         is_backward, is_inference, **kwargs):
            if _is_spyre_graph(example_inputs):
                return Graphified(model, static_input_idxs)
            return super().cudagraphify(model, example_inputs, static_input_idxs,
                                        device_index=device_index, is_backward=is_backward,
                                        is_inference=is_inference, **kwargs)

    config.cudagraph_policy = SpyreGraphPolicy()

    check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes

    def check_multiple_devices_or_any_cpu_nodes(device_node_mapping):
        devices = {d for d in device_node_mapping if d.type != "meta"}
        if len(devices) == 1 and next(iter(devices)).type == "spyre":
            return None
        return check_devices(device_node_mapping)

    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_multiple_devices_or_any_cpu_nodes
