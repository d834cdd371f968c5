"""scaled_dot_product_attention on spyre takes the kernel CPU takes.

ATen asks a per-device stub which fused kernel to use; spyre answers as CPU
does (csrc/aten/attention.cpp), so where CPU runs its flash-attention kernel,
spyre queues the same kernel on the current stream, with CPU's numerics, and
torch.compile keeps it as one extern kernel.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import profile
from torch_spyre.testing import Gate, completed_ops, launched_ops

SPYRE = torch.device("spyre:0")
FLASH = "aten::_scaled_dot_product_flash_attention_for_cpu"


pytestmark = pytest.mark.usefixtures("drained_device")  # conftest.py


def qkv(device, requires_grad=False):
    torch.manual_seed(0)
    shape = (2, 4, 16, 8)  # batch, heads, sequence, head dim
    return [torch.randn(shape).to(device).requires_grad_(requires_grad) for _ in range(3)]


def ops_run(fn):
    with profile() as prof:
        fn()
        torch.spyre.synchronize()
    return {event.key for event in prof.key_averages()}


@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_takes_cpus_flash_kernel_with_cpus_results(is_causal):
    q, k, v = qkv("cpu")
    dq, dk, dv = qkv(SPYRE)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    names = ops_run(lambda: F.scaled_dot_product_attention(dq, dk, dv, is_causal=is_causal))
    assert FLASH in names
    assert "aten::bmm" not in names and "aten::_safe_softmax" not in names
    assert torch.equal(F.scaled_dot_product_attention(dq, dk, dv, is_causal=is_causal).cpu(),
                       expected)


def test_attention_gradients_equal_cpus():
    q, k, v = qkv("cpu", requires_grad=True)
    dq, dk, dv = qkv(SPYRE, requires_grad=True)
    F.scaled_dot_product_attention(q, k, v).sum().backward()
    names = ops_run(lambda: F.scaled_dot_product_attention(dq, dk, dv).sum().backward())
    assert FLASH + "_backward" in names
    for ours, ref in [(dq, q), (dk, k), (dv, v)]:
        assert torch.equal(ours.grad.cpu(), ref.grad)


def test_the_flash_kernel_is_queued_on_the_current_stream():
    dq, dk, dv = qkv(SPYRE)
    s = torch.spyre.Stream()
    with s:
        F.scaled_dot_product_attention(dq, dk, dv)  # warm: a signature's first call runs at once
    s.synchronize()
    expected = F.scaled_dot_product_attention(dq, dk, dv).cpu()
    with Gate() as gate, s:
        gate.block()
        before = launched_ops(s)
        out = F.scaled_dot_product_attention(dq, dk, dv)
        assert launched_ops(s) - before == 1
        assert launched_ops(s) - completed_ops(s) == 2  # the gate and the kernel wait
    s.synchronize()
    assert torch.equal(out.cpu(), expected)


def test_sdpa_kernel_math_is_honoured():
    q, k, v = qkv("cpu")
    dq, dk, dv = qkv(SPYRE)
    with sdpa_kernel([SDPBackend.MATH]):
        expected = F.scaled_dot_product_attention(q, k, v)
        names = ops_run(lambda: F.scaled_dot_product_attention(dq, dk, dv))
        out = F.scaled_dot_product_attention(dq, dk, dv)
    assert FLASH not in names and "aten::bmm" in names
    torch.testing.assert_close(out.cpu(), expected)


def test_dropout_takes_the_math_path_and_draws_as_cpu_does():
    # CPU's choice refuses the fused kernels for dropout_p > 0.
    q, k, v = qkv("cpu")
    dq, dk, dv = qkv(SPYRE)
    torch.manual_seed(3)
    expected = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    torch.manual_seed(3)
    names = ops_run(lambda: F.scaled_dot_product_attention(dq, dk, dv, dropout_p=0.5))
    torch.manual_seed(3)
    out = F.scaled_dot_product_attention(dq, dk, dv, dropout_p=0.5)
    assert FLASH not in names and "aten::_scaled_dot_product_attention_math" in names
    assert torch.equal(out.cpu(), expected)


def test_an_attention_mask_gives_cpus_result():
    q, k, v = qkv("cpu")
    dq, dk, dv = qkv(SPYRE)
    mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = F.scaled_dot_product_attention(dq, dk, dv, attn_mask=mask.to(SPYRE))
    assert torch.equal(out.cpu(), expected)


@pytest.mark.slow  # an inductor compile (a C++ compiler subprocess); test_compile.py covers compiling
def test_compiled_attention_keeps_the_flash_kernel():
    dq, dk, dv = qkv(SPYRE)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v) * 2)
    compiled(dq, dk, dv)
    names = ops_run(lambda: compiled(dq, dk, dv))
    assert FLASH in names
    torch.testing.assert_close(compiled(dq, dk, dv).cpu(),
                               F.scaled_dot_product_attention(dq, dk, dv).cpu() * 2)
