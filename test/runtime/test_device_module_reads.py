"""What torch's device-generic code reads from torch.spyre by torch.cuda's names.

torch looks these up with getattr(torch, device_type) / torch.get_device_module();
a missing one is silently skipped in places (torch.utils.checkpoint skips saving
the RNG state), so each is tested through the torch code that reads it.
"""

import io
from functools import partial

import pytest
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from conftest import run_python


def test_initialized_is_true_once_the_runtime_runs_and_false_before():
    proc = run_python(
        """
        import torch
        before = torch.spyre._initialized
        torch.ones(1, device="spyre")
        print(before, torch.spyre._initialized, torch.spyre.is_initialized())
        """
    )
    assert proc.stdout.split() == ["False", "True", "True"]


def test_initialized_is_false_in_a_bad_fork():
    proc = run_python(
        """
        import os, torch
        torch.ones(1, device="spyre")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, f"{torch.spyre._initialized} {torch.spyre._is_in_bad_fork()}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        print(os.read(r, 100).decode())
        """
    )
    assert proc.stdout.split() == ["False", "True"]


def _mlp_grads(*, ckpt, use_reentrant=False, device="spyre"):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 64), nn.Dropout(0.5), nn.Linear(64, 4)).to(device)
    x = torch.randn(5, 8, device=device, requires_grad=True)
    y = checkpoint(m, x, use_reentrant=use_reentrant) if ckpt else m(x)
    y.sum().backward()
    return x.grad.cpu(), [p.grad.cpu() for p in m.parameters()], torch.spyre.get_rng_state()


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpoint_with_dropout_replays_the_same_masks(use_reentrant):
    plain_x, plain_params, plain_state = _mlp_grads(ckpt=False)
    ckpt_x, ckpt_params, ckpt_state = _mlp_grads(ckpt=True, use_reentrant=use_reentrant)
    assert torch.equal(plain_x, ckpt_x)
    for plain, ckpt in zip(plain_params, ckpt_params):
        assert torch.equal(plain, ckpt)
    # The recomputation ran under the saved state and put the generator back:
    # it continues exactly as after the run without checkpointing.
    assert torch.equal(plain_state, ckpt_state)


class _Layer(nn.Module):
    """A transformer-style layer: attention-free, but with dropout at two places."""

    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(width)

    def forward(self, h):
        return self.norm(h + self.drop(self.down(self.drop(torch.nn.functional.gelu(self.up(h))))))


class _Model(nn.Module):
    """gradient_checkpointing as transformers' PreTrainedModel does it: each layer
    through `partial(checkpoint, use_reentrant=...)` while training."""

    def __init__(self, width=16, depth=3):
        super().__init__()
        self.layers = nn.ModuleList(_Layer(width) for _ in range(depth))
        self.head = nn.Linear(width, 3)
        self.gradient_checkpointing = False

    def gradient_checkpointing_enable(self, use_reentrant):
        self.gradient_checkpointing = True
        self._gradient_checkpointing_func = partial(checkpoint, use_reentrant=use_reentrant)

    def forward(self, h):
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                h = self._gradient_checkpointing_func(layer.__call__, h)
            else:
                h = layer(h)
        return self.head(h)


def _train(*, ckpt, use_reentrant=False, steps=2):
    torch.manual_seed(1)
    model = _Model().to("spyre").train()
    if ckpt:
        model.gradient_checkpointing_enable(use_reentrant)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 7, 16, device="spyre", requires_grad=use_reentrant)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("use_reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_transformers_style_gradient_checkpointing_equals_no_checkpointing(use_reentrant):
    plain_losses, plain_params = _train(ckpt=False, use_reentrant=use_reentrant)
    ckpt_losses, ckpt_params = _train(ckpt=True, use_reentrant=use_reentrant)
    assert plain_losses == ckpt_losses
    for plain, ckpt in zip(plain_params, ckpt_params):
        assert torch.equal(plain, ckpt)


def test_default_generators_and_get_generator():
    gens = torch.spyre.default_generators
    assert isinstance(gens, tuple) and len(gens) == torch.spyre.device_count()
    assert all(isinstance(g, torch.Generator) for g in gens)
    assert torch.spyre._get_generator(torch.device("spyre:0")) is gens[0]
    assert torch.spyre._get_generator(torch.device("spyre")) is gens[torch.spyre.current_device()]
    # aot_autograd's generic helpers read these
    from torch._functorch._aot_autograd.utils import get_default_generator, get_device_rng_state

    assert get_default_generator(torch.device("spyre:0")) is gens[0]
    torch.spyre.manual_seed(7)
    assert torch.equal(get_device_rng_state(torch.device("spyre:0")), gens[0].get_state())


def test_get_device_index_as_torch_cuda():
    get = torch.spyre._utils._get_device_index
    current = torch.spyre.current_device()
    assert [get(3), get("spyre:2"), get(torch.device("spyre:1")), get("spyre", True),
            get(None, True), get("cpu", allow_cpu=True)] == [3, 2, 1, current, current, -1]
    with pytest.raises(ValueError, match=r"^Expected a torch.device with a specified index or an "
                                         r"integer, but got: spyre$"):
        get("spyre")
    with pytest.raises(ValueError, match=r"^Expected a spyre device, but got: cpu$"):
        get("cpu")
    with pytest.raises(ValueError, match=r"^Expected a spyre or cpu device, but got: meta$"):
        get("meta", allow_cpu=True)
    with pytest.raises(ValueError, match=r"^Expected a torch.device, a str or an int, but got: 1.5$"):
        get(1.5)


def test_torch_load_map_location_reads_utils():
    buf = io.BytesIO()
    torch.save({"w": torch.arange(6.0).reshape(2, 3)}, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location="spyre:0")
    assert loaded["w"].device == torch.device("spyre:0")
    assert loaded["w"].cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_every_name_torch_reads_from_a_device_module_exists():
    """The names torch 2.13's device-generic code reads from torch.<device> (found by
    grepping its sources for get_device_module / getattr(torch, device_type) /
    device_module.X), each with torch.cuda's kind of value."""
    names = ["_initialized", "_is_in_bad_fork", "_lazy_init", "_get_generator", "_utils",
             "current_device", "current_stream", "default_generators", "default_stream", "device",
             "device_count", "empty_cache", "get_device_name", "get_rng_state", "is_available",
             "is_initialized", "memory_allocated", "memory_reserved", "memory_stats",
             "memory_summary", "set_device", "set_rng_state", "stream", "synchronize", "Event",
             "Stream", "manual_seed", "manual_seed_all"]
    for name in names:
        assert hasattr(torch.cuda, name), name
        assert hasattr(torch.spyre, name), name
    # read from PrivateUse1 backends only (torch.amp's autocast checks)
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.get_device_module("spyre") is torch.spyre
