"""`torch.compile(mode="reduce-overhead")` on spyre: compiled graphs replay as spyre graphs,
with the semantics of inductor's CUDA graph trees (docs/graphs.md, "reduce-overhead").

Inductor 2.13 wraps compiled graphs in CUDA graphs only for CUDA: its check of a
graph's devices (`cudagraph_utils.check_multiple_devices_or_any_cpu_nodes`) gives
every other device a reason to skip, and its trees (`cudagraph_trees`) are built on
torch.cuda's allocator. Inductor's pluggable `config.cudagraph_policy` decides how a
compiled graph is wrapped; spyre installs one that wraps graphs on spyre in
`GraphedFunction` and leaves every other device to inductor's default, and makes the
device check accept a graph whose only device is spyre.

`GraphedFunction`, per compiled graph and thread, as cudagraph_trees' `cudagraphify_impl`
and its tree manager behave:
  - its graphs are keyed by the call's int inputs (int arguments, and the sizes of a
    dynamic-shape graph), with inductor's warning past
    `config.triton.cudagraph_dynamic_shape_warn_limit` keys;
  - a key's first call runs the compiled code as is (the warm-up: first calls of an op may
    run at the call); its second call captures a spyre graph and replays it once (capture
    runs nothing); later calls replay. Each call runs the function exactly once;
  - static inputs (parameters and buffers; in a backward, saved activations a graph made)
    are used in place: the graph reads and writes their memory, and a call whose static
    inputs are elsewhere records another graph. Other inputs are copied into the graph's
    own tensors; a function that mutates such an input runs without a graph (inductor's
    `check_for_mutation`, logged and counted as inductor does);
  - each call returns fresh tensors over the graph's output memory (graph_outputs.py). A
    graph whose previous outputs are still held (a forward whose backward has not run yet,
    outputs kept across calls) is not replayed over them: another graph of the same key is
    used or recorded. Recordings beyond the first per key are bounded by
    `config.triton.cudagraph_unexpected_rerecord_limit`; past it the call runs without a
    graph, logged as inductor logs it;
  - a graph that cannot be captured (a random op, an op that runs at the call, a host
    read) makes the function run without a graph, with a warning naming why.
"""

import threading
import types
import warnings

import torch

from . import graph_outputs

_installed = False
_lock = threading.Lock()
_policy_class = None  # SpyreGraphPolicy, once installed


def _is_spyre_graph(example_inputs):
    return any(isinstance(t, torch.Tensor) and t.device.type == "spyre" for t in example_inputs)


def _skip(message):
    from torch._inductor.cudagraph_utils import log_cudagraph_skip_and_bump_counter

    log_cudagraph_skip_and_bump_counter(message)


class GraphedFunction:
    """`model` (a boxed compiled callable: it takes a list and clears it) replayed as spyre
    graphs, per thread, as inductor's CUDA graph trees replay a compiled function."""

    def __init__(self, model, static_input_idxs, *, is_backward, placeholders=(),
                 mutated_input_idxs=()):
        self.model = model
        self.static_input_idxs = frozenset(static_input_idxs)
        self.is_backward = is_backward
        self.placeholders = placeholders
        self.mutated_input_idxs = tuple(mutated_input_idxs)
        self.threads = threading.local()

    def __call__(self, inputs):
        state = getattr(self.threads, "state", None)
        if state is None:
            state = self.threads.state = _ThreadGraphs(self, inputs)
        return state(inputs)


class _ThreadGraphs:
    """One thread's graphs of a `GraphedFunction`, by int key."""

    def __init__(self, function, first_inputs):
        self.function = function
        self.int_idxs = [i for i, v in enumerate(first_inputs) if isinstance(v, int)]
        self.warmed_up = set()  # keys whose first call ran
        self.graphs = {}  # key -> [_Recording]
        self.recordings = {}  # key -> recordings made
        self.eager = False  # the function runs without graphs
        self.warned_dynamic = False

    def __call__(self, inputs):
        if self.eager:
            return self.function.model(inputs)
        key = tuple(inputs[i] for i in self.int_idxs)
        if key not in self.warmed_up:
            reason = self._mutation_reason(inputs)
            if reason is not None:
                _skip(reason)
                self.eager = True
                self._free_graphs()  # other keys' graphs can never replay again either
                return self.function.model(inputs)
            self.warmed_up.add(key)
            return self.function.model(inputs)
        static = self._static_idxs(inputs)
        candidates = self.graphs.setdefault(key, [])
        for recording in candidates:
            if recording.matches(inputs) and not recording.outputs.any_alive():
                return recording.run(inputs)
        return self._record(key, inputs, static)

    def _static_idxs(self, inputs):
        """Inputs used in place. In a backward, inductor marks the saved activations static,
        which holds when a forward graph made them; others are copied."""
        static = self.function.static_input_idxs
        if not self.function.is_backward:
            return sorted(i for i in static if isinstance(inputs[i], torch.Tensor))
        return sorted(i for i in static if isinstance(inputs[i], torch.Tensor) and (
            isinstance(inputs[i], torch.nn.Parameter)
            or graph_outputs.owning_storage(inputs[i]) is not None))

    def _mutation_reason(self, inputs):
        from torch._inductor.cudagraph_utils import check_for_mutation

        if not self.function.mutated_input_idxs:
            return None
        func = types.SimpleNamespace(
            mutated_input_idxs=self.function.mutated_input_idxs,
            static_input_idxs=self._static_idxs(inputs),
            placeholders=self.function.placeholders)
        return check_for_mutation(func, inputs, lambda t: False)

    def _record(self, key, inputs, static):
        from torch._inductor import config
        from torch._inductor.cudagraph_utils import maybe_warning_due_to_dynamic_shape

        made = self.recordings.get(key, 0)
        if made == 0 and not self.warned_dynamic and self.int_idxs:
            self.warned_dynamic = maybe_warning_due_to_dynamic_shape(
                {k: None for k in self.recordings}, key)
        if made > config.triton.cudagraph_unexpected_rerecord_limit:
            _skip(f"skipping cudagraph due to function exceeding max re-recording limit "
                  f"(={config.triton.cudagraph_unexpected_rerecord_limit}) on spyre graph "
                  f"key {key}: its graphs' outputs are still held or its static inputs moved")
            return self.function.model(inputs)
        self.recordings[key] = made + 1
        try:
            recording = _Recording(self.function.model, inputs, static)
        except _Uncapturable as error:
            freed = self._free_graphs()
            warnings.warn(f"torch.compile(mode='reduce-overhead') on spyre: this graph cannot be "
                          f"captured, it runs without a spyre graph ({error}){freed}",
                          stacklevel=3)
            self.eager = True
            torch.spyre.synchronize()
            return self.function.model(inputs)
        self.graphs[key].append(recording)
        return recording.run(inputs)

    def _free_graphs(self):
        """The function runs without graphs for good: its graphs can never replay again, so
        they let go of their pools now (outputs still held keep their own memory), not at
        `torch._dynamo.reset()`. Returns what the warning says about it."""
        recordings = [r for candidates in self.graphs.values() for r in candidates]
        self.graphs.clear()
        for recording in recordings:
            recording.graph.reset()
        if not recordings:
            return ""
        return (f"; its {len(recordings)} recorded spyre graph(s) are freed (their pools go back "
                "to the device at the next empty_cache() or allocation that needs them)")


class _Uncapturable(Exception):
    pass


class _Capture:
    """`with graph:`, except that a capture that ran out of memory is abandoned, not ended:
    ending it would warn "the captured graph is empty" over the real failure."""

    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        self.graph.__enter__()

    def __exit__(self, exc_type, exc, tb):
        if isinstance(exc, torch.OutOfMemoryError):
            self.graph.reset()
            return False
        return self.graph.__exit__(exc_type, exc, tb)


class _Recording:
    """One spyre graph of a compiled function: its static inputs' addresses, the tensors its
    other inputs are copied into, and the memory its outputs live in."""

    def __init__(self, model, inputs, static):
        from torch._dynamo.utils import preserve_rng_state
        from torch._inductor.compile_fx import get_expanded_dims, static_input

        self.static_ptrs = [(i, inputs[i].data_ptr()) for i in static]
        self.copied = [i for i, x in enumerate(inputs)
                       if isinstance(x, torch.Tensor) and i not in static]
        self.expanded = {i: get_expanded_dims(inputs[i]) for i in self.copied}
        capture_inputs = list(inputs)
        for i in self.copied:
            capture_inputs[i] = static_input(inputs[i])
        for i in static:
            # A saved activation a graph made: capture on the tensor owning its memory.
            owner = graph_outputs.owning_storage(inputs[i])
            x = inputs[i].detach()
            if owner is not None:
                x = x.new_empty(0).set_(owner, x.storage_offset(), x.size(), x.stride())
            capture_inputs[i] = x
        self.placeholders = {i: capture_inputs[i] for i in self.copied}

        # Capture on a side stream (nothing runs: the replay below computes this call).
        current = torch.spyre.current_stream()
        side = torch.spyre.Stream()
        side.wait_stream(current)
        self.graph = torch.accelerator.Graph(capture_error_mode="thread_local")
        try:
            with preserve_rng_state(), side, _Capture(self.graph):
                outputs = model(list(capture_inputs))
        except RuntimeError as error:
            self.graph.reset()
            raise _Uncapturable(str(error.__context__ or error).splitlines()[0]) from error
        if not isinstance(outputs, (list, tuple)):
            outputs = (outputs,)
        self._describe_outputs(list(outputs), capture_inputs)

    def _describe_outputs(self, outputs, capture_inputs):
        """How each call rebuilds the outputs: a value as is, a tensor aliasing an input over
        the caller's input (a graph writes no input but static ones: a function that does runs
        without a graph), any other tensor over the graph's memory."""
        input_storages = {x.untyped_storage().data_ptr(): i for i, x in enumerate(capture_inputs)
                          if isinstance(x, torch.Tensor)}
        owned = {}
        self.layout = []
        for out in outputs:
            if not isinstance(out, torch.Tensor):
                self.layout.append(("value", out))
                continue
            ptr = out.untyped_storage().data_ptr()
            meta = (out.dtype, out.storage_offset(), out.size(), out.stride())
            if ptr in input_storages:
                self.layout.append(("input", input_storages[ptr], meta))
            else:
                owned.setdefault(ptr, out.untyped_storage())
                self.layout.append(("graph", ptr, meta))
        self.outputs = graph_outputs.Owners(owned)

    def matches(self, inputs):
        return all(inputs[i].data_ptr() == ptr for i, ptr in self.static_ptrs)

    def run(self, inputs):
        from torch._inductor.compile_fx import index_expanded_dims_and_copy_

        for i in self.copied:
            index_expanded_dims_and_copy_(self.placeholders[i], inputs[i], self.expanded[i])
        aliased_inputs = {i: inputs[i] for kind, i, *_ in self.layout if kind == "input"}
        inputs.clear()
        self.graph.replay()
        storages = {}
        results = []
        for entry in self.layout:
            if entry[0] == "value":
                results.append(entry[1])
                continue
            kind, where, (dtype, offset, size, stride) = entry
            if kind == "input":
                storage = aliased_inputs[where].untyped_storage()
            else:
                storage = storages.get(where)
                if storage is None:
                    storage = storages[where] = self.outputs.alias(where)
            device = storage.device
            results.append(torch.empty(0, dtype=dtype, device=device)
                           .set_(storage, offset, size, stride))
        return results


class _StandInTreeManager:
    """What inductor asks of the CUDA tree manager of the forward's device when the backward
    runs without a graph (output_code.maybe_handle_backward_generation): spyre graphs keep no
    tree state across functions, so there is nothing to do."""

    def set_to_running_backward(self):
        pass

    def shutdown(self):
        pass


def _stand_in_tree_manager(device_index):
    from torch._inductor import cudagraph_trees

    container = cudagraph_trees.get_container(device_index)
    if container.tree_manager is None:
        container.tree_manager = _StandInTreeManager()


def _skips_dynamic(example_inputs):
    """`config.triton.cudagraph_skip_dynamic_graphs`: inductor applies it itself only without
    graph partitions (compile_fx.py); a policy wraps the whole graph, so it is applied here."""
    from torch._inductor import config
    from torch._inductor.utils import any_is_symbolic

    if not (config.triton.cudagraph_skip_dynamic_graphs and any_is_symbolic(*example_inputs)):
        return False
    _skip("skipping cudagraphs due to graph with symbolic shapes inputs and "
          "config.triton.cudagraph_skip_dynamic_graphs=True.")
    return True


def _log_skip(output_code):
    """Inductor logs why a compiled graph runs without a CUDA graph only for CUDA graphs
    (output_code.py); spyre graphs' reasons are logged the same way."""
    from torch._inductor import config
    from torch._inductor.cudagraph_utils import cudagraphs_log, log_cudagraph_skip_and_bump_counter

    if not config.triton.cudagraphs or "spyre" not in getattr(output_code, "device_types", ()):
        return
    info = getattr(output_code, "cudagraph_info", None)
    reason = getattr(output_code, "disabled_cudagraphs_reason", None)
    if info is None:
        if reason:  # found at lowering: inductor counted it already
            prefix = "skipping cudagraphs due to "
            cudagraphs_log.warning("%s", reason if reason.startswith(prefix) else prefix + reason)
    elif info.cudagraph_fail_reasons:
        log_cudagraph_skip_and_bump_counter(
            reason or f"skipping cudagraphs due to {info.cudagraph_fail_reasons}")


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

    from .. import _patches

    if config.cudagraph_policy is not None or torch.cuda.is_available():
        return
    if not _patches.check(_patches.GRAPHS):
        return  # spyre graphs run without graphs, with inductor's own skip reason

    class SpyreGraphPolicy(cudagraph_utils.CUDAGraphPolicy):
        """Spyre graphs for spyre graphs; inductor's default for every other device."""

        def cudagraphify(self, model, example_inputs, static_input_idxs, *, device_index,
                         is_backward, is_inference, **kwargs):
            if _is_spyre_graph(example_inputs):
                if not is_backward:
                    _stand_in_tree_manager(device_index)
                if _skips_dynamic(example_inputs):
                    return model
                return GraphedFunction(model, static_input_idxs, is_backward=is_backward,
                                       placeholders=kwargs.get("placeholders", ()),
                                       mutated_input_idxs=kwargs.get("mutated_input_idxs", ()))
            return super().cudagraphify(model, example_inputs, static_input_idxs,
                                        device_index=device_index, is_backward=is_backward,
                                        is_inference=is_inference, **kwargs)

        def wrap_output(self, output_code):
            _log_skip(output_code)
            return super().wrap_output(output_code)

    config.cudagraph_policy = SpyreGraphPolicy()

    global _policy_class
    _policy_class = SpyreGraphPolicy
    _patches.apply_graph_device_check(cudagraph_utils, policy_in_force)


def policy_in_force():
    """Spyre's policy is inductor's `config.cudagraph_policy`. Another one set later (the
    user's, or None) must never get a spyre graph: CUDA's graph trees would take it. Read at
    lowering by the device check, whose verdict inductor caches with the compiled graph, so
    it is part of the cache key too (cache_key.py)."""
    from torch._inductor import config

    return _policy_class is not None and isinstance(config.cudagraph_policy, _policy_class)
