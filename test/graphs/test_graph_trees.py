"""torch.compile(mode="reduce-overhead") on spyre behaves as inductor's CUDA graph trees
(torch_spyre/_compile/graphs.py, docs/graphs.md "reduce-overhead"): a graph per int key, the
function run once per call, static inputs written in place, other mutated inputs run without a
graph, held outputs never overwritten. Every result equals mode="default" bit for bit.
The models (a GPT-2 shaped one, training steps, a static-cache decode) are in the slow tier."""

import gc
import importlib.util
import json
import logging
import re

import pytest
import torch

import torch_spyre  # noqa: F401
from conftest import run_python

pytestmark = pytest.mark.usefixtures("drained_device", "fresh_dynamo")


def spyre(values):
    return torch.tensor(values).to("spyre")


def seeded(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to("spyre")


def graph_launches(fn):
    """`fn()`'s result and how many spyre graphs it launched (the profiler's runtime calls)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        result = fn()
        torch.spyre.synchronize()
    return result, sum(e.name == "launchGraph" for e in prof.events())


class SkipLog(logging.Handler):
    """The skips inductor logs (`log_cudagraph_skip_and_bump_counter`)."""

    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def skips():
    from torch._dynamo.utils import counters
    from torch._inductor.cudagraph_utils import cudagraphs_log

    counters["inductor"].clear()
    handler = SkipLog()
    cudagraphs_log.addHandler(handler)
    yield handler.messages
    cudagraphs_log.removeHandler(handler)


# ------------------------------------------------------------------ a graph per int key


def test_int_arguments_get_a_graph_each():
    results = {}
    for mode in ("default", "reduce-overhead"):
        f = torch.compile(lambda x, n: x * n, mode=mode)
        x = spyre([1.0, 2.0])
        results[mode] = [f(x, n).tolist() for n in (2, 3, 5, 2, 3, 5)]
        g = torch.compile(lambda x, n: x * n + 1, mode=mode)
        results[mode] += [g(x, n).tolist() for n in (2, 3, 4, 5, 6, 4)]
        torch._dynamo.reset()
    assert results["reduce-overhead"] == results["default"]
    assert results["default"][:3] == [[2.0, 4.0], [3.0, 6.0], [5.0, 10.0]]
    assert results["default"][6:] == [[3.0, 5.0], [4.0, 7.0], [5.0, 9.0], [6.0, 11.0],
                                      [7.0, 13.0], [5.0, 9.0]]


def test_int_key_replays_its_own_graph():
    f = torch.compile(lambda x, n: x * n, mode="reduce-overhead")
    x = spyre([1.0, 2.0])
    for n in (2, 3, 2, 3):  # n=3 makes the graph dynamic; each key warms up, then records
        f(x, n)
    out, launches = graph_launches(lambda: f(x, 2).tolist())
    assert (out, launches) == ([2.0, 4.0], 1)
    out, launches = graph_launches(lambda: f(x, 3).tolist())
    assert (out, launches) == ([3.0, 6.0], 1)


def test_dynamic_shapes_get_a_graph_per_shape():
    g = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead", dynamic=True)
    sizes = (8, 4, 8, 4, 8, 4)
    outs = [g(torch.arange(float(n)).to("spyre")).tolist() for n in sizes]
    assert outs == [[2.0 * i + 1 for i in range(n)] for n in sizes]
    out, launches = graph_launches(lambda: g(torch.ones(4, device="spyre")).tolist())
    assert (out, launches) == ([3.0] * 4, 1)


def test_many_shapes_warn_as_inductor_does(skips):
    from torch._inductor import config

    g = torch.compile(lambda x: x + 1, mode="reduce-overhead", dynamic=True)
    with config.patch({"triton.cudagraph_dynamic_shape_warn_limit": 2}):
        for n in (2, 3, 4):
            for _ in range(2):  # warm-up, then record
                assert g(torch.zeros(n, device="spyre")).tolist() == [1.0] * n
    warnings = [m for m in skips if "distinct sizes" in m]
    assert len(warnings) == 1
    assert warnings[0].startswith("CUDAGraph supports dynamic shapes by recording a new graph for "
                                  "each distinct input size. Recording too many CUDAGraphs may "
                                  "lead to extra overhead. We have observed 3 distinct sizes.")


class TinyGPT(torch.nn.Module):
    """A GPT-2 shaped model: token and position embeddings, one pre-norm block of causal
    attention and MLP, a tied head."""

    def __init__(self, vocab=32, dim=16, heads=2, positions=16):
        super().__init__()
        self.heads = heads
        self.wte = torch.nn.Embedding(vocab, dim)
        self.wpe = torch.nn.Embedding(positions, dim)
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc = torch.nn.Linear(dim, 4 * dim)
        self.out = torch.nn.Linear(4 * dim, dim)
        self.ln_f = torch.nn.LayerNorm(dim)

    def forward(self, ids):
        b, t = ids.shape
        h = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        q, k, v = self.qkv(self.ln1(h)).split(h.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=ids.device).tril()
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        h = h + self.proj(attn.transpose(1, 2).reshape(b, t, -1))
        h = h + self.out(torch.nn.functional.gelu(self.fc(self.ln2(h))))
        return self.ln_f(h) @ self.wte.weight.t()


@pytest.mark.slow
def test_tiny_gpt_at_several_lengths_equals_the_default_mode():
    torch.manual_seed(0)
    model = TinyGPT().to("spyre").eval()
    lengths = (12, 7, 12, 7, 12, 7)
    ids = {t: torch.randint(0, 32, (1, t), generator=torch.Generator().manual_seed(t)).to("spyre")
           for t in set(lengths)}
    results = {}
    with torch.no_grad():
        for mode in ("default", "reduce-overhead"):
            compiled = torch.compile(model, mode=mode)
            results[mode] = [compiled(ids[t]).cpu() for t in lengths]
            last, launches = graph_launches(lambda: compiled(ids[12]).cpu())
            results[mode].append(last)
            if mode == "reduce-overhead":
                assert launches == 1
            torch._dynamo.reset()
    assert all(torch.equal(a, b) for a, b in zip(results["default"], results["reduce-overhead"]))
    assert [r.shape[1] for r in results["default"]] == [*lengths, 12]


# ------------------------------------------------------------------ inputs mutated in place


def test_a_mutated_plain_input_runs_without_a_graph_and_is_logged(skips):
    from torch._dynamo.utils import counters

    @torch.compile(mode="reduce-overhead")
    def step(buf, x):
        buf.add_(x)
        return buf * 2

    buf = torch.zeros(3, device="spyre")
    x = torch.ones(3, device="spyre")
    outs = [step(buf, x).tolist() for _ in range(3)]
    assert outs == [[2.0] * 3, [4.0] * 3, [6.0] * 3]
    assert buf.tolist() == [3.0] * 3
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert len(skips) == 1
    assert skips[0].startswith("skipping cudagraphs due to mutated inputs (1 instances). "
                               "Found from : \n")
    assert "buf.add_(x)" in skips[0]
    _, launches = graph_launches(lambda: step(buf, x))
    assert launches == 0 and buf.tolist() == [4.0] * 3


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


def test_static_inputs_are_written_in_place_once_per_call(skips):
    model = Counter().to("spyre")
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.zeros(1, device="spyre")
    outs = [compiled(x).item() for _ in range(3)]
    assert outs == [1.0, 2.0, 3.0]
    assert model.count.item() == 3.0
    out, launches = graph_launches(lambda: compiled(x).item())
    assert (out, launches, model.count.item()) == (4.0, 1, 4.0)
    assert skips == []


def test_batchnorm_statistics_are_updated_once_per_call():
    results = {}
    for mode in ("default", "reduce-overhead"):
        torch.manual_seed(0)
        bn = torch.nn.BatchNorm1d(4).to("spyre")
        compiled = torch.compile(bn, mode=mode)
        with torch.no_grad():
            results[mode] = [(compiled(seeded(8, 4, seed=s)).cpu(), bn.running_mean.cpu(),
                              bn.running_var.cpu(), bn.num_batches_tracked.item())
                             for s in range(4)]
        torch._dynamo.reset()
    for a, b in zip(results["default"], results["reduce-overhead"]):
        assert all(torch.equal(p, q) for p, q in zip(a[:3], b[:3])) and a[3] == b[3]
    assert [r[3] for r in results["reduce-overhead"]] == [1, 2, 3, 4]


# ------------------------------------------------------------------ outputs held across calls


def test_held_outputs_are_never_overwritten():
    f = torch.compile(lambda x: x * 2, mode="reduce-overhead")
    held = [f(spyre([float(i)])) for i in range(5)]  # warm-up, record, then a graph each
    assert [t.item() for t in held] == [0.0, 2.0, 4.0, 6.0, 8.0]
    del held
    gc.collect()
    outs = []
    for i in range(4):  # nothing held: the first graph again, one launch a call
        out, launches = graph_launches(lambda: f(spyre([float(i)])).item())
        outs.append((out, launches))
    assert outs == [(0.0, 1), (2.0, 1), (4.0, 1), (6.0, 1)]


def test_a_loop_keeping_its_last_output_alternates_between_two_graphs(skips):
    from torch._inductor import config

    f = torch.compile(lambda x: x + 1, mode="reduce-overhead")
    seen = []
    y = None
    with config.patch({"triton.cudagraph_unexpected_rerecord_limit": 1}):
        for i in range(8):
            # `y` still holds the previous call's output during the call.
            y, launches = graph_launches(lambda: f(spyre([float(i)])))
            seen.append((y.item(), launches))
    assert seen == [(1.0, 0), (2.0, 1), (3.0, 1), (4.0, 1), (5.0, 1), (6.0, 1), (7.0, 1),
                    (8.0, 1)]
    assert skips == []  # one graph re-recorded, within the limit


def test_re_recording_is_bounded_by_inductors_limit(skips):
    from torch._inductor import config

    f = torch.compile(lambda x: x + 1, mode="reduce-overhead")
    with config.patch({"triton.cudagraph_unexpected_rerecord_limit": 1}):
        held = [f(spyre([float(i)])) for i in range(5)]
    assert [t.item() for t in held] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # Call 2 records, call 3 re-records (limit 1), calls 4 and 5 run without a graph.
    assert len(skips) == 2
    assert skips[0] == ("skipping cudagraph due to function exceeding max re-recording limit "
                        "(=1) on spyre graph key (): its graphs' outputs are still held or its "
                        "static inputs moved")


def test_outputs_held_past_dynamo_reset_stay_valid(empty_device):
    f = torch.compile(lambda x: x * 3, mode="reduce-overhead")
    x = spyre([1.0, 2.0])
    f(x)
    f(x)
    out = f(spyre([2.0, 5.0]))
    del f
    torch._dynamo.reset()
    gc.collect()
    torch.accelerator.empty_cache()
    filler = torch.full((1024,), 7.0, device="spyre")  # would reuse freed memory
    assert out.tolist() == [6.0, 15.0]
    del out, filler, x
    gc.collect()
    torch.spyre.synchronize()
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == 0


# ------------------------------------------------------------------ training


def mlp_bn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3)).to("spyre")


def conv_bn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 5)).to("spyre")


def train(make, shape, mode, steps=3):
    """Per step: the loss, the gradients, BatchNorm's statistics (the model's second module)."""
    model = make()
    compiled = torch.compile(model, mode=mode)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    record = []
    for step in range(steps):
        loss = compiled(seeded(*shape, seed=step)).square().mean()
        loss.backward()
        bn = model[1]
        record.append([loss.detach().cpu(), *(p.grad.cpu() for p in model.parameters()),
                       bn.running_mean.cpu(), bn.running_var.cpu(), bn.num_batches_tracked.cpu()])
        opt.step()
        opt.zero_grad()
    torch._dynamo.reset()
    return record


@pytest.mark.slow
@pytest.mark.parametrize("make, shape", [(conv_bn, (2, 3, 6, 6)), (mlp_bn, (4, 8))],
                         ids=["conv_bn", "mlp_bn"])
def test_training_steps_equal_the_default_mode(make, shape, recwarn):
    default = train(make, shape, "default")
    graphed = train(make, shape, "reduce-overhead")
    for step, (a, b) in enumerate(zip(default, graphed)):
        assert all(torch.equal(p, q) for p, q in zip(a, b)), f"step {step}"
    assert [int(r[-1]) for r in graphed] == [1, 2, 3]


@pytest.mark.slow
def test_first_step_gradients_respect_donated_buffers(monkeypatch):
    """The backward reuses saved activations' memory (donated buffers): each of its calls
    (warm-up, capture and first replay, replay) must run it once, on the saved activations as
    the forward left them."""
    from torch._functorch._aot_autograd import graph_compile
    from torch._inductor.utils import fresh_cache

    donated = []
    collect = graph_compile.collect_bw_donated_buffer_idxs

    def recording_collect(*args, **kwargs):
        donated.append(collect(*args, **kwargs))
        return donated[-1]

    monkeypatch.setattr(graph_compile, "collect_bw_donated_buffer_idxs", recording_collect)
    with fresh_cache():  # compiled, not loaded from a cache
        default = train(mlp_bn, (4, 8), "default")
        graphed = train(mlp_bn, (4, 8), "reduce-overhead")  # warm-up, capture + replay, replay
    assert len(donated) == 2 and all(donated)  # the backward does have donated buffers
    for a, b in zip(default, graphed):
        assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_two_forwards_before_one_backward_record_another_graph():
    results = {}
    for mode in ("default", "reduce-overhead"):
        model = mlp_bn()
        compiled = torch.compile(model, mode=mode)
        results[mode] = []
        for step in range(4):
            first = compiled(seeded(4, 8, seed=2 * step)).square().mean()
            second = compiled(seeded(4, 8, seed=2 * step + 1)).square().mean()
            _, launches = graph_launches(lambda: (first + 2 * second).backward())
            results[mode].append(([p.grad.cpu() for p in model.parameters()], launches))
            for p in model.parameters():
                p.grad = None
        torch._dynamo.reset()
    for (a, _), (b, _) in zip(results["default"], results["reduce-overhead"]):
        assert all(torch.equal(p, q) for p, q in zip(a, b))
    # Both backwards replay graphs once each forward has its own graph (the first step's first
    # forward and backward are warm-ups).
    assert [n for _, n in results["reduce-overhead"]] == [1, 2, 2, 2]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="transformers is not installed")
def test_static_cache_generate_equals_eager():
    import transformers

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config).to("spyre").eval()
    ids = torch.tensor([[1, 2, 3, 4]]).to("spyre")
    kwargs = dict(max_new_tokens=8, do_sample=False, cache_implementation="static")
    eager = model.generate(ids, **kwargs).cpu()
    model.forward = torch.compile(model.forward, mode="reduce-overhead")
    assert torch.equal(model.generate(ids, **kwargs).cpu(), eager)


def test_dynamic_graphs_skipped_by_inductors_config_run_without_a_graph(skips):
    from torch._dynamo.utils import counters
    from torch._inductor import config

    with config.patch({"triton.cudagraph_skip_dynamic_graphs": True}):
        g = torch.compile(lambda x: x * 2, mode="reduce-overhead", dynamic=True)
        outs = [g(torch.ones(n, device="spyre")).tolist() for n in (3, 3, 2)]
        out, launches = graph_launches(lambda: g(torch.ones(3, device="spyre")).tolist())
    assert outs == [[2.0] * 3, [2.0] * 3, [2.0] * 2]
    assert (out, launches) == ([2.0] * 3, 0)
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert skips == ["skipping cudagraphs due to graph with symbolic shapes inputs and "
                     "config.triton.cudagraph_skip_dynamic_graphs=True."]


def test_a_backward_without_a_graph_after_a_graphed_forward():
    """Inductor asks the forward device's tree manager to note a backward that runs without
    a graph; spyre stands in for it."""
    from torch._inductor import config

    model = torch.nn.Linear(4, 2).to("spyre")
    compiled = torch.compile(model, mode="reduce-overhead")
    grads = []
    for _ in range(3):
        out = compiled(torch.ones(3, 4, device="spyre")).sum()
        with config.patch(force_disable_cudagraph_TESTING_ONLY=True):  # the backward only
            out.backward()
        grads.append(model.weight.grad.tolist())
        model.weight.grad = None
    assert grads == [[[3.0] * 4] * 2] * 3


class StaticCacheDecoder(TinyGPT):
    """TinyGPT with a key/value cache in buffers written in place at the given positions, as
    transformers' StaticCache does (cache_implementation="static")."""

    def __init__(self, max_len=16):
        super().__init__(positions=max_len)
        self.max_len = max_len
        shape = (1, self.heads, max_len, 16 // self.heads)
        self.register_buffer("k_cache", torch.zeros(shape))
        self.register_buffer("v_cache", torch.zeros(shape))

    def forward(self, ids, positions):
        b, t = ids.shape
        h = self.wte(ids) + self.wpe(positions)
        q, k, v = self.qkv(self.ln1(h)).split(h.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        scores = (q @ self.k_cache.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        slots = torch.arange(self.max_len, device=ids.device)
        mask = slots[None, :] <= positions[:, None]
        attn = scores.masked_fill(~mask, float("-inf")).softmax(-1) @ self.v_cache
        h = h + self.proj(attn.transpose(1, 2).reshape(b, t, -1))
        h = h + self.out(torch.nn.functional.gelu(self.fc(self.ln2(h))))
        return self.ln_f(h) @ self.wte.weight.t()


def greedy_decode(model, prompt, new_tokens):
    """Prefill, then one token per step at the next cache position; the tokens and logits."""
    ids, logits_seen = prompt, []
    positions = torch.arange(prompt.shape[1], device=prompt.device)
    step_input = prompt
    for _ in range(new_tokens):
        logits = model(step_input, positions)
        logits_seen.append(logits[:, -1].cpu())
        token = logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, token], dim=1)
        positions = positions[-1:] + 1
        step_input = token
    return ids.cpu(), logits_seen


@pytest.mark.slow
def test_static_cache_decode_equals_eager_and_the_default_mode(skips):
    torch.manual_seed(0)
    model = StaticCacheDecoder().to("spyre").eval()
    prompt = torch.tensor([[3, 1, 4, 1]]).to("spyre")
    results = {}
    with torch.no_grad():
        for mode in ("eager", "default", "reduce-overhead"):
            model.k_cache.zero_()
            model.v_cache.zero_()
            run = model if mode == "eager" else torch.compile(model, mode=mode)
            results[mode], launches = graph_launches(lambda: greedy_decode(run, prompt, 8))
            torch._dynamo.reset()
            # The prefill and the first of the 7 decode steps warm up; the second records and
            # replays, the others replay: 6 graph launches, the cache written in place.
            assert launches == (6 if mode == "reduce-overhead" else 0)
    assert skips == []
    assert torch.equal(results["reduce-overhead"][0], results["eager"][0])
    assert torch.equal(results["reduce-overhead"][0], results["default"][0])
    assert all(torch.equal(a, b) for a, b in zip(results["reduce-overhead"][1],
                                                 results["default"][1]))
    assert results["eager"][0].shape == (1, 12)


def test_a_graph_with_a_cpu_tensor_runs_without_a_graph_and_says_why(skips):
    from torch._dynamo.utils import counters

    @torch.compile(mode="reduce-overhead")
    def times(x, t):
        return x * t

    x = spyre([1.0, 2.0])
    outs = [times(x, torch.tensor(v)).tolist() for v in (2.0, 3.0, 4.0)]
    out, launches = graph_launches(lambda: times(x, torch.tensor(5.0)).tolist())
    assert outs == [[2.0, 4.0], [3.0, 6.0], [4.0, 8.0]] and (out, launches) == ([5.0, 10.0], 0)
    assert counters["inductor"]["cudagraph_skips"] == 1
    assert len(skips) == 1
    assert skips[0].startswith("skipping cudagraphs due to cpu device (arg1_1). Found from : \n")
    assert ", in times\n" in skips[0]  # the line, as compiled (inductor's cache keeps it)


# ------------------------------------------------------------------ other policies, memory


def test_a_policy_of_the_users_turns_spyre_graphs_off_and_the_code_runs():
    # Importing cudagraph_utils installed spyre's policy and device check; a policy set after
    # it replaces spyre's. Before, that policy got the spyre graph and CUDA's graph trees
    # raised "PyTorch was compiled without CUDA support".
    from torch._inductor import config
    from torch._inductor.cudagraph_utils import (CUDAGraphPolicy,
                                                 check_multiple_devices_or_any_cpu_nodes)

    class Users(CUDAGraphPolicy):
        pass

    with config.patch(cudagraph_policy=Users()):
        f = torch.compile(lambda x, n: x * n + 1, mode="reduce-overhead")
        x = spyre([1.0, 2.0])
        results, launches = graph_launches(lambda: [f(x, n).tolist() for n in (2, 2, 2, 3)])
        # Inductor's own reason for a device that is not CUDA (spyre's policy is not in force).
        reason = check_multiple_devices_or_any_cpu_nodes({torch.device("spyre", 0): None})
    assert results == [[3.0, 5.0]] * 3 + [[4.0, 7.0]]
    assert launches == 0
    assert reason == "skipping cudagraphs due to multiple devices: device(type='spyre', index=0)"
    assert check_multiple_devices_or_any_cpu_nodes({torch.device("spyre", 0): None}) is None


def test_a_capture_out_of_memory_frees_the_functions_graphs():
    # 48 MiB of device memory: each int key's graph holds a pool of its own (2 MiB) until the
    # 24th capture runs out of memory. The function then runs without graphs for good, so its
    # graphs can never replay again: before, they kept their pools (the whole budget) until
    # torch._dynamo.reset(), and the warning only said "the captured graph is empty".
    result = run_python(
        """
        import json
        import warnings
        import torch
        import torch_spyre  # noqa: F401

        f = torch.compile(lambda x, n: x * n + 1, mode="reduce-overhead")
        x = torch.tensor([1.0, 2.0]).to("spyre")
        values = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for n in range(1, 41):
                for _ in range(2):  # the key's warm-up, then its capture (or a call without)
                    values.append(f(x, n).tolist())
        torch.spyre.synchronize()
        torch.spyre.empty_cache()
        reserved = torch.spyre.memory_reserved()
        after = f(x, 3).tolist()
        expected = [[n + 1.0, 2.0 * n + 1] for n in range(1, 41) for _ in range(2)]
        print(json.dumps([values == expected, [str(w.message) for w in caught], reserved,
                          after]))
        """,
        env={"FLEX_STUB_MEMORY_BYTES": str(48 * 2**20)},
    )
    right, messages, reserved, after = json.loads(result.stdout.strip().splitlines()[-1])
    assert right
    assert after == [4.0, 7.0]
    assert len(messages) == 1, messages  # not "the captured graph is empty" besides
    assert re.fullmatch(
        r"torch\.compile\(mode='reduce-overhead'\) on spyre: this graph cannot be captured, it "
        r"runs without a spyre graph \(Spyre out of memory on spyre:0: tried to allocate 8 bytes "
        r"\(a segment of 2097152 bytes\); .*\); its 22 recorded spyre graph\(s\) are freed "
        r"\(their pools go back to the device at the next empty_cache\(\) or allocation that "
        r"needs them\)", messages[0]), messages[0]
    # What the function's eager calls use (x, its outputs); the graphs held 44 MiB before.
    assert reserved == 4 * 2**20
