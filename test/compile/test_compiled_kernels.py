"""What inductor's kernels do on spyre (issue 31, items 2, 6, 7 and 13).

- A compiled kernel records the stream it runs on for every tensor it uses,
  as eager launches do: an input freed on the host is not reused before the
  kernel has read it.
- 0-dim CPU tensors (dynamo's changing Python floats, torch.tensor(3.0)) are
  scalars for spyre kernels, passed by value as CUDA kernels get them.
- Inductor's choices made for the device type "cpu" that decide what C++ code
  computes are CPU's on spyre too: compiled spyre == compiled CPU bit for bit.
- In a graph with CPU work beside spyre work, CPU kernels run on the host and
  spyre kernels on the stream.
"""

import pytest
import torch
import torch.nn.functional as F
from torch_spyre.testing import Gate

SPYRE = torch.device("spyre:0")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")  # conftest


# ------------------------------------------------------------ item 2: stream uses


def test_an_input_freed_on_the_host_waits_for_the_compiled_kernel_that_reads_it():
    # x is made on the default stream and read by a kernel queued on s behind a
    # gate; the host drops x and the default stream's next allocation of the same
    # size is filled with 5. Without recording s on x's block, that allocation
    # takes x's block at once and the kernel reads 5s: sin(5) + 1 = 0.041.
    f = torch.compile(lambda t: t.sin() + 1)
    n = 4096
    f(torch.zeros(n, device=SPYRE))  # compile outside the gate
    torch.spyre.synchronize()
    s = torch.spyre.Stream()
    with Gate() as gate:
        gate.block(s)
        x = torch.zeros(n, device=SPYRE)
        s.wait_stream(torch.spyre.current_stream())
        with torch.spyre.stream(s):
            y = f(x)
        del x
        z = torch.full((n,), 5.0, device=SPYRE)  # default stream, not gated
        torch.spyre.current_stream().synchronize()
        gate.release()
    s.synchronize()
    assert torch.equal(y.cpu(), torch.ones(n))
    assert torch.equal(z.cpu(), torch.full((n,), 5.0))


# ------------------------------------------------------------ item 6: CPU scalars


def test_a_changing_python_float_and_a_0dim_cpu_tensor_are_scalars():
    x = torch.linspace(-2, 2, 32)
    xs = x.to(SPYRE)
    f = torch.compile(lambda t, a: t * a + 1)
    for a in (2.5, 3.5, 4.25):  # the second call makes `a` a 0-dim CPU tensor input
        assert torch.equal(f(xs, a).cpu(), x * a + 1)
    a = torch.tensor(3.0)
    assert torch.equal(f(xs, a).cpu(), x * a + 1)
    d = torch.compile(lambda t, a: t * a + 1, dynamic=True)
    assert torch.equal(d(xs, 2.5).cpu(), x * 2.5 + 1)
    assert torch.equal(d(xs[:7], 0.75).cpu(), x[:7] * 0.75 + 1)


def test_a_0dim_cpu_tensor_is_read_at_the_call_not_when_the_kernel_runs():
    x = torch.linspace(-2, 2, 32)
    xs = x.to(SPYRE)
    f = torch.compile(lambda t, a: t * a + 1)
    a = torch.tensor(3.0)
    f(xs, a)  # compile outside the gate
    with Gate() as gate:
        gate.block()
        y = f(xs, a)
        a.fill_(100.0)  # the host changes it before the kernel has run
        gate.release()
    assert torch.equal(y.cpu(), x * 3.0 + 1)


def test_a_cpu_tensor_of_more_than_0_dims_is_refused_by_a_spyre_kernel():
    from torch_spyre import _C

    kernel = _C._CompiledKernel(1, "p", "k")  # never launched: the argument is refused first
    with pytest.raises(ValueError, match=r"compiled kernel k: argument 0 is on cpu, "
                                         r"expected spyre:0 \(or a 0-dim CPU tensor\)"):
        kernel(torch.zeros(2))


# ------------------------------------------------------------ item 7: CPU's choices


def cpu_choice_ops(x, w, b):
    c = x.shape[1]
    return (
        F.layer_norm(x, (c,), w, b),
        x.var(1),
        x.std(1, correction=0),
        *torch.var_mean(x, 1),
        F.batch_norm(x, None, None, w, b, training=True),
        F.group_norm(x, 4, w, b),
        x / 3,  # CPU divides by a constant; other devices multiply by its reciprocal
        (x * 3).sum(1) / 200.0,
        x.t().argmax(),  # logical indices over a transposed tensor (spyre gave storage offsets)
        torch.arange(0.1, 7.3, 0.37, device=x.device),  # CPU accumulates in float64
    )


def cpu_choice_extern_ops(a, b, c, a2, b2, c2, p, q, r, s, x, w, cb, base, index, src):
    return (
        a @ b,  # (1,300)x(300,1): CPU multiplies and sums in C++, others call ATen
        torch.addmm(c, a, b),
        torch.addmm(c2, a2, b2),  # (1,12)x(12,10): tiny, multiply and sum on CPU
        torch.bmm(p, q),  # one row times one column per batch
        torch.bmm(r, s),  # one column per batch: tuned_bmm's CPU branch
        F.conv2d(x, w, cb),  # CPU keeps the bias in the convolution; others add it after
        base.scatter_reduce(0, index, src, "sum"),  # CPU falls back to ATen; others add atomically
    )


@pytest.mark.slow
def test_cpus_choices_make_compiled_spyre_equal_compiled_cpu_bit_for_bit():
    # Inputs far from 0 (mean 10), where Welford and the two-pass variance, or
    # x / 3 and x * (1 / 3), differ in the last bits: before spyre took CPU's
    # choices these differed by up to 3.6e-6.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 200, generator=g) * 3 + 10
    w = torch.randn(200, generator=g)
    b = torch.randn(200, generator=g)
    f = torch.compile(cpu_choice_ops)
    ours = f(x.to(SPYRE), w.to(SPYRE), b.to(SPYRE))
    torch._dynamo.reset()
    expected = f(x, w, b)
    assert len(ours) == len(expected) == 11
    for i, (o, e) in enumerate(zip(ours, expected)):
        assert o.device == SPYRE
        assert torch.equal(o.cpu(), e), i
    assert ours[9].item() == x.t().argmax().item()

    # Matmuls, a bfloat16 convolution with a bias, a scatter_reduce sum: before
    # spyre took CPU's choices each differed: by up to 2.9e-6 (the matmuls),
    # 0.5 (the convolution) and 5.5e-4 (the scatter sum).
    args = (
        torch.randn(1, 300, generator=g), torch.randn(300, 1, generator=g),
        torch.randn(1, 1, generator=g),
        torch.randn(1, 12, generator=g), torch.randn(12, 10, generator=g),
        torch.randn(10, generator=g),
        torch.randn(3, 1, 50, generator=g), torch.randn(3, 50, 1, generator=g),
        torch.randn(3, 7, 40, generator=g), torch.randn(3, 40, 1, generator=g),
        (torch.randn(2, 3, 9, 9, generator=g) * 3 + 10).bfloat16(),
        torch.randn(4, 3, 3, 3, generator=g).bfloat16(), (torch.randn(4, generator=g) * 50).bfloat16(),
        torch.randn(7, generator=g), torch.randint(0, 7, (200000,), generator=g),
        torch.randn(200000, generator=g),
    )
    torch._dynamo.reset()
    f = torch.compile(cpu_choice_extern_ops)
    ours = f(*(t.to(SPYRE) for t in args))
    torch._dynamo.reset()
    expected = f(*args)
    assert len(ours) == len(expected) == 7
    for i, (o, e) in enumerate(zip(ours, expected)):
        assert o.device == SPYRE
        assert torch.equal(o.cpu(), e), i


@pytest.mark.slow
def test_cpus_choices_give_compiled_norms_cpus_saved_statistics():
    # CPU saves batch_norm's statistics empty in eval mode, and batch_norm's
    # and layer_norm's in the input's dtype; spyre's eager kernels are CPU's.
    # Before, compiled spyre saved the (6,) running statistics in eval mode
    # and float32 statistics for bfloat16.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 6, 5, generator=g) * 3 + 10
    w, b, mean = (torch.randn(6, generator=g) for _ in range(3))
    var = torch.rand(6, generator=g) + 0.5
    lw, lb = (torch.randn(5, generator=g).bfloat16() for _ in range(2))

    def norms(x, w, b, mean, var, xb, wb, bb, lw, lb):
        return (*torch.ops.aten.native_batch_norm(x, w, b, mean, var, False, 0.1, 1e-5),
                *torch.ops.aten.native_batch_norm(xb, wb, bb, None, None, True, 0.1, 1e-5),
                *torch.ops.aten.native_layer_norm(xb, [5], lw, lb, 1e-5))

    args = (x, w, b, mean, var, x.bfloat16(), w.bfloat16(), b.bfloat16(), lw, lb)
    f = torch.compile(norms)
    ours = f(*(t.to(SPYRE) for t in args))
    torch._dynamo.reset()
    expected = f(*args)
    assert [(tuple(t.shape), t.dtype) for t in expected] == [
        ((8, 6, 5), torch.float32), ((0,), torch.float32), ((0,), torch.float32),
        ((8, 6, 5), torch.bfloat16), ((6,), torch.bfloat16), ((6,), torch.bfloat16),
        ((8, 6, 5), torch.bfloat16), ((8, 6, 1), torch.bfloat16), ((8, 6, 1), torch.bfloat16)]
    for i, (o, e) in enumerate(zip(ours, expected)):
        assert o.dtype == e.dtype and torch.equal(o.cpu(), e), i


def kernels_and_extern_calls(wrapper_code):
    # The wrapper's kernel definitions (a CPU and a spyre kernel are defined by
    # different calls) and its ATen calls, in order.
    import re

    return re.findall(r"^(\w+) = (?:async_compile\.cpp_pybinding|spyre_kernels\.cpp_kernel)\("
                      r"|((?:torch\.ops\.aten|extern_kernels)\.[\w.]+)\(", wrapper_code, re.M)


@pytest.mark.slow
def test_cpus_choices_make_spyre_generate_the_kernels_cpu_generates():
    # Same values either way, other kernels: CPU concatenates int8 with ATen's
    # cat and never rewrites a right pad as a cat (before, spyre fused both
    # into one kernel: cpp_fused_cat_constant_pad_nd_mul_0, no ATen call).
    from torch._inductor.utils import run_and_get_code

    def cat_and_pad(a, b, x):
        return torch.cat([a, b], 1), F.pad(x, (0, 3), value=1.5) * 2

    a = torch.arange(24, dtype=torch.int8).reshape(2, 3, 2, 2)
    x = torch.arange(20.0).reshape(4, 5)
    codes, outs = [], []
    for device in ("cpu", SPYRE):
        torch._dynamo.reset()
        out, code = run_and_get_code(torch.compile(cat_and_pad), a.to(device), (a + 1).to(device),
                                     x.to(device))
        codes.append(kernels_and_extern_calls(code[0]))
        outs.append([t.cpu() for t in out])
    assert codes[1] == codes[0] == [("cpp_fused_cat_0", ""), ("cpp_fused_cat_constant_pad_nd_mul_1", ""),
                                    ("", "torch.ops.aten.cat.default")]
    assert all(torch.equal(o, e) for o, e in zip(outs[1], outs[0]))


# ------------------------------------------------------------ item 13: mixed devices


@pytest.mark.slow
def test_cpu_work_beside_spyre_work_runs_where_its_tensors_live():
    # Values whose results are exact, so compiled equals eager bit for bit.
    x = torch.arange(-8.0, 8.0) / 4
    y = torch.arange(16.0) - 5
    ys = y.to(SPYRE)

    both = torch.compile(lambda a, b: (a * 3 + 1, b * 2))
    c, s = both(x, ys)
    assert c.device.type == "cpu" and s.device == SPYRE
    assert torch.equal(c, x * 3 + 1) and torch.equal(s.cpu(), y * 2)

    # The same loops on both devices: two kernels, one per device.
    same = torch.compile(lambda a, b: (a * 2, b * 2))
    c, s = same(x, ys)
    assert torch.equal(c, x * 2) and torch.equal(s.cpu(), y * 2)

    to_cpu = torch.compile(lambda b: b.cpu() + 1)
    out = to_cpu(ys)
    assert out.device.type == "cpu" and torch.equal(out, y + 1)

    # Moves to the CPU, keeps computing there, and comes back.
    there_and_back = torch.compile(lambda b: (((b * b).cpu() * 2).to(SPYRE) + 1, (b.cpu() - 1).sum()))
    back, total = there_and_back(ys)
    assert back.device == SPYRE and total.device.type == "cpu"
    assert torch.equal(back.cpu(), y * y * 2 + 1)
    assert torch.equal(total, (y - 1).sum())
