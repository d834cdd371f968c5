"""Issue 17: torch.autocast("spyre") with CUDA's op-level casting policy, and
torch.amp.GradScaler("spyre")."""

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

LOW = [torch.bfloat16, torch.float16]


def spyre_autocast(dtype):
    return torch.autocast("spyre", dtype=dtype)


def test_registrations_are_cuda_s_without_cudnn():
    spyre = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastPrivateUse1"))
    cuda = set(torch._C._dispatch_get_registrations_for_dispatch_key("AutocastCUDA"))
    assert cuda - spyre == {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    assert spyre - cuda == set()
    assert {"aten::mm", "aten::linear", "aten::conv2d", "aten::mse_loss", "aten::addcmul",
            "aten::sum", "aten::binary_cross_entropy"} <= spyre


def test_supported_dtypes_are_exactly_the_ones_autocast_takes():
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    a = torch.ones(2, 2, device="spyre")
    for dtype in torch.spyre.get_amp_supported_dtype():
        with spyre_autocast(dtype):
            assert torch.is_autocast_enabled("spyre")
            assert torch.get_autocast_dtype("spyre") == dtype
            assert (a @ a).dtype == dtype
    for dtype in (torch.float32, torch.float64, torch.int8):
        with pytest.warns(UserWarning) as record:
            with spyre_autocast(dtype):
                assert not torch.is_autocast_enabled("spyre")
                assert (a @ a).dtype == torch.float32
        assert [str(w.message) for w in record] == [
            "In spyre autocast, but the target dtype is not supported. Disabling autocast.\n"
            "spyre Autocast only supports dtypes of torch.float16, torch.bfloat16 currently."
        ]


def test_default_dtype_is_float16():
    assert torch.get_autocast_dtype("spyre") == torch.float16
    a = torch.ones(2, 2, device="spyre")
    with torch.autocast("spyre"):
        assert (a @ a).dtype == torch.float16
    assert not torch.is_autocast_enabled("spyre")


@pytest.mark.parametrize("dtype", LOW)
def test_lower_precision_ops(dtype):
    a = torch.randn(4, 4, device="spyre")
    b3 = torch.randn(2, 4, 4, device="spyre")
    w = torch.randn(3, 4, device="spyre")
    with spyre_autocast(dtype):
        results = {
            "mm": a @ a,
            "matmul": torch.matmul(a, a),
            "addmm": torch.addmm(a, a, a),
            "bmm": torch.bmm(b3, b3),
            "baddbmm": torch.baddbmm(b3, b3, b3),
            "linear": F.linear(a, w),
            "mv": torch.mv(a, a[0]),
            "einsum": torch.einsum("ij,jk->ik", a, a),
            "prelu": F.prelu(a, torch.ones(1, device="spyre")),
        }
    assert {name: r.dtype for name, r in results.items()} == {name: dtype for name in results}


@pytest.mark.parametrize("dtype", LOW)
def test_fp32_ops_run_in_float32(dtype):
    x = torch.rand(4, 4, device="spyre").to(dtype) + 0.5
    target = torch.rand(4, 4, device="spyre").to(dtype)
    with spyre_autocast(dtype):
        results = {
            "exp": x.exp(),
            "log": x.log(),
            "pow": x.pow(2),
            "rsqrt": x.rsqrt(),
            "softmax": torch.softmax(x, 1),
            "log_softmax": torch.log_softmax(x, 1),
            "sum": x.sum(),
            "cumsum": x.cumsum(0),
            "layer_norm": F.layer_norm(x, (4,)),
            "mse_loss": F.mse_loss(x, target),
            "l1_loss": F.l1_loss(x, target),
            "smooth_l1_loss": F.smooth_l1_loss(x, target),
            "bce_with_logits": F.binary_cross_entropy_with_logits(x, target),
            "norm": torch.norm(x),
        }
    assert {name: r.dtype for name, r in results.items()} == dict.fromkeys(results, torch.float32)


@pytest.mark.parametrize("dtype", LOW)
def test_promote_ops_take_the_widest_input(dtype):
    a = torch.randn(4, device="spyre")
    low = a.to(dtype)
    with spyre_autocast(dtype):
        assert torch.addcmul(a, low, low).dtype == torch.float32
        assert torch.addcmul(low, low, low).dtype == dtype
        assert torch.atan2(low, a).dtype == torch.float32
        assert torch.dot(low, a).dtype == torch.float32
        assert torch.cross(low.view(1, 4)[:, :3], a.view(1, 4)[:, :3], dim=1).dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW)
def test_other_ops_keep_their_input_dtype(dtype):
    a = torch.randn(4, device="spyre")
    with spyre_autocast(dtype):
        assert (torch.relu(a).dtype, (a + a).dtype, a.to(dtype).relu().dtype) == (
            torch.float32, torch.float32, dtype)
        with torch.autocast("spyre", enabled=False):
            assert (a.view(2, 2) @ a.view(2, 2)).dtype == torch.float32


def test_binary_cross_entropy_is_banned_as_on_cuda():
    p = torch.full((3,), 0.5, device="spyre")
    with spyre_autocast(torch.bfloat16):
        with pytest.raises(RuntimeError) as info:
            F.binary_cross_entropy(p, p)
    assert str(info.value).startswith(
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using "
        "torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast.")


@pytest.mark.parametrize("dtype", LOW)
def test_spyre_matches_cpu_autocast_where_the_policies_agree(dtype):
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    with torch.autocast("cpu", dtype=dtype):
        expected = (a @ b, F.linear(a, b), F.mse_loss(a @ b, a))
    with spyre_autocast(dtype):
        sa, sb = a.to("spyre"), b.to("spyre")
        got = (sa @ sb, F.linear(sa, sb), F.mse_loss(sa @ sb, sa))
    for e, s in zip(expected, got):
        assert s.dtype == e.dtype
        assert torch.equal(s.cpu(), e)


def mlp(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.GELU(),
                         nn.Linear(32, 4))


def train_steps(net, device, dtype, steps=3):
    """Steps of SGD on an autocast forward; returns the losses and final parameters."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=g).to(device)
    y = torch.randn(8, 4, generator=g).to(device)
    losses = []
    for _ in range(steps):
        with torch.autocast(device, dtype=dtype):
            out = net(x)
            loss = F.mse_loss(out, y)
        assert (out.dtype, loss.dtype) == (dtype, torch.float32)
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad.dtype == torch.float32 for p in net.parameters())
        optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in net.parameters()]


@pytest.mark.parametrize("dtype", LOW)
def test_mlp_training_step_equals_cpu_autocast(dtype):
    cpu_losses, cpu_params = train_steps(mlp(0), "cpu", dtype)
    spyre_losses, spyre_params = train_steps(mlp(0).to("spyre"), "spyre", dtype)
    assert spyre_losses == cpu_losses
    for s, c in zip(spyre_params, cpu_params):
        assert torch.equal(s, c)
    assert spyre_losses[-1] < spyre_losses[0]


def cnn(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 5))


@pytest.mark.parametrize("dtype", LOW)
def test_cnn_training_step_matches_cpu_autocast(dtype):
    def run(device):
        net = cnn(0).to(device)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(2)
        x = torch.randn(4, 3, 8, 8, generator=g).to(device)
        y = torch.tensor([0, 1, 2, 3]).to(device)
        with torch.autocast(device, dtype=dtype):
            out = net(x)
            loss = F.cross_entropy(out, y)
        assert (out.dtype, loss.dtype) == (dtype, torch.float32)
        loss.backward()
        optimizer.step()
        return loss.item(), [p.detach().cpu() for p in net.parameters()]

    cpu_loss, cpu_params = run("cpu")
    spyre_loss, spyre_params = run("spyre")
    # CPU autocast keeps max_pool2d in the input dtype too; bf16 tolerance covers
    # kernels that differ in accumulation order.
    assert spyre_loss == pytest.approx(cpu_loss, rel=1e-2)
    for s, c in zip(spyre_params, cpu_params):
        torch.testing.assert_close(s, c, rtol=1.6e-2, atol=1e-2)


def test_grad_scaler_scales_unscales_and_skips_inf_steps():
    net = mlp(0).to("spyre")
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("spyre", init_scale=2.0**10, growth_interval=1)
    x = torch.ones(2, 16, device="spyre")

    def step(poison=False):
        with spyre_autocast(torch.float16):
            loss = net(x).float().square().mean()
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        if poison:
            net[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in net.parameters()]
        scaler.step(optimizer)
        scaler.update()
        after = [p.detach().cpu() for p in net.parameters()]
        return [torch.equal(a, b) for a, b in zip(before, after)]

    unchanged = step()
    assert scaler.get_scale() == 2.0**11  # grown after a finite step (growth_interval=1)
    assert not all(unchanged)
    assert scaler._scale.device == torch.device("spyre:0")
    unchanged = step(poison=True)
    assert all(unchanged)  # the step was skipped
    assert scaler.get_scale() == 2.0**10  # backed off by 0.5


def test_grad_scaler_matches_cpu():
    def run(device):
        net = mlp(0).to(device)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**8)
        x = torch.ones(2, 16).to(device)
        with torch.autocast(device, dtype=torch.float16):
            loss = net(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return scaler.get_scale(), [p.detach().cpu() for p in net.parameters()]

    cpu_scale, cpu_params = run("cpu")
    spyre_scale, spyre_params = run("spyre")
    assert spyre_scale == cpu_scale == 2.0**8
    for s, c in zip(spyre_params, cpu_params):
        assert torch.equal(s, c)


def test_autocast_emits_no_warning():
    net = mlp(0).to("spyre")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with spyre_autocast(torch.bfloat16):
            net(torch.ones(2, 16, device="spyre")).sum().backward()
