"""The meta kernels written in csrc/launch/meta_rules.cpp, for ops whose only
Meta kernel in torch 2.13 is a Python one (issue 30, item 3), and for
convolutions, whose composite kernel sends meta tensors to a backend that has
no kernel (before their rules, every convolution ran at the call).

Each case runs on CPU and on spyre: the results must be equal with the same
shape, strides and dtype (the rule gives what CPU's kernel allocates). Cases
the rule infers must also be queued: called while a gate blocks the stream,
they return before it is released. Cases a rule leaves to the CPU kernel run
at the call, with CPU's result or CPU's error.
"""

import threading

import pytest
import torch
import torch.nn.functional as F

from _helpers import ROOT, wait_until
from conftest import run_python
from torch_spyre.testing import Gate


def put(t, device):
    # From pinned memory, non_blocking: only queued, so a case can be made
    # while a gate blocks the stream.
    return t.pin_memory().to(device, non_blocking=True) if device != "cpu" else t


def data(device, *shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g)
    if dtype.is_complex:
        t = torch.complex(t, torch.randn(*shape, generator=g))
    elif not dtype.is_floating_point:
        t = (t * 4).round()
    return put(t.to(dtype), device)


def transposed(device, *shape, **kw):
    return data(device, *reversed(shape), **kw).transpose(0, -1)


def channels_last(device, *shape, **kw):
    return data(device, *shape, **kw).to(memory_format=torch.channels_last)


def bn(device, shape, training, weight_dtype=torch.float32, **kw):
    x = data(device, *shape, **kw) if "layout" not in kw else kw.pop("layout")(device, *shape)
    c = shape[1]
    w, b = data(device, c, dtype=weight_dtype, seed=1), data(device, c, dtype=weight_dtype, seed=2)
    rm, rv = put(torch.zeros(c, dtype=weight_dtype), device), put(torch.ones(c, dtype=weight_dtype), device)
    out = torch.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)
    return (*out, rm, rv)


def where_out(device):
    out = torch.empty(0, device=device)
    torch.where(data(device, 4, 5) > 0, data(device, 4, 5, seed=1), data(device, 5, seed=2), out=out)
    return out


def abs_out(device, dtype):
    out = torch.empty(0, dtype=dtype, device=device)
    torch.abs(transposed(device, 3, 4, dtype=dtype), out=out)
    return out


def conv_backward(d):
    return torch.ops.aten.convolution_backward(
        data(d, 2, 4, 6, 6), data(d, 2, 3, 6, 6, seed=1), data(d, 4, 3, 3, 3, seed=2), [4], [1, 1],
        [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])


# (name, fn(device) -> tensor or tuple, queued: whether the rule infers it)
CASES = [
    ("conv1d.groups_stride_padding", lambda d: F.conv1d(
        data(d, 2, 4, 9), data(d, 6, 2, 3, seed=1), data(d, 6, seed=2), stride=2, padding=1,
        groups=2), True),
    ("conv2d.dilation", lambda d: F.conv2d(data(d, 2, 3, 9, 9), data(d, 4, 3, 3, 3, seed=1),
                                           dilation=2), True),
    ("conv2d.unbatched", lambda d: F.conv2d(data(d, 3, 5, 5), data(d, 2, 3, 3, 3, seed=1),
                                            data(d, 2, seed=2), padding=1), True),
    ("conv2d.bfloat16", lambda d: F.conv2d(data(d, 1, 2, 6, 6, dtype=torch.bfloat16),
                                           data(d, 3, 2, 3, 3, dtype=torch.bfloat16, seed=1)), True),
    ("conv3d", lambda d: F.conv3d(data(d, 1, 2, 4, 5, 4), data(d, 3, 2, 2, 2, 2, seed=1),
                                  stride=(1, 2, 1)), True),
    ("conv_transpose2d.output_padding_groups", lambda d: F.conv_transpose2d(
        data(d, 2, 4, 5, 5), data(d, 4, 3, 3, 3, seed=1), data(d, 6, seed=2), stride=2, padding=1,
        output_padding=1, groups=2), True),
    ("convolution_backward", conv_backward, True),
    ("conv1d.complex", lambda d: F.conv1d(data(d, 1, 2, 7, dtype=torch.complex64),
                                          data(d, 3, 2, 3, dtype=torch.complex64, seed=1)), False),
    ("where", lambda d: torch.where(data(d, 4, 5) > 0, data(d, 4, 5, seed=1), data(d, 4, 5, seed=2)), True),
    ("where.broadcast_promote", lambda d: torch.where(
        data(d, 4, 1) > 0, transposed(d, 4, 5), data(d, 5, dtype=torch.float64)), True),
    ("where.channels_last", lambda d: torch.where(
        channels_last(d, 2, 3, 4, 4) > 0, channels_last(d, 2, 3, 4, 4, seed=1), 0.5), True),
    ("where.int_scalar", lambda d: torch.where(data(d, 6) > 0, data(d, 6, dtype=torch.int32), 7), True),
    ("where.out", where_out, True),
    ("where.uint8_condition", lambda d: torch.where(
        (data(d, 5) > 0).to(torch.uint8), data(d, 5), data(d, 5, seed=1)), False),
    ("hardtanh", lambda d: F.hardtanh(data(d, 4, 5)), True),
    ("hardtanh.transposed", lambda d: F.hardtanh(transposed(d, 4, 5), -0.5, 0.5), True),
    ("hardtanh.channels_last", lambda d: F.hardtanh(channels_last(d, 2, 3, 4, 4)), True),
    ("hardtanh.int32", lambda d: F.hardtanh(data(d, 7, dtype=torch.int32), -2, 2), True),
    ("hardtanh.uint8", lambda d: F.hardtanh(data(d, 7, dtype=torch.uint8).abs(), 0, 2), False),
    ("flip", lambda d: data(d, 3, 4, 5).flip(0, -1), True),
    ("flip.transposed", lambda d: transposed(d, 3, 4).flip(1), True),
    ("flip.channels_last", lambda d: channels_last(d, 2, 3, 4, 4).flip(1), True),
    ("flip.bool", lambda d: (data(d, 6) > 0).flip(0), True),
    ("dot", lambda d: torch.dot(data(d, 9), data(d, 9, seed=1)), True),
    ("dot.int64", lambda d: torch.dot(data(d, 9, dtype=torch.int64), data(d, 9, dtype=torch.int64)), True),
    ("dot.strided", lambda d: torch.dot(data(d, 18)[::2], data(d, 9, seed=1)), True),
    ("abs.out", lambda d: abs_out(d, torch.float32), True),
    ("abs.out.int16", lambda d: abs_out(d, torch.int16), True),
    ("var", lambda d: data(d, 4, 5).var(), True),
    ("var.dim", lambda d: data(d, 4, 5, 6).var(dim=(0, -1), keepdim=True), True),
    ("var.correction", lambda d: torch.var(transposed(d, 4, 5), dim=1, correction=0), True),
    ("var.complex", lambda d: data(d, 4, 5, dtype=torch.complex64).var(0), True),
    ("var.half", lambda d: data(d, 4, 5, dtype=torch.float16).var(1), True),
    ("std", lambda d: data(d, 4, 5).std(-1), True),
    ("var_mean", lambda d: torch.var_mean(data(d, 4, 5, 6), dim=1), True),
    ("std_mean.complex", lambda d: torch.std_mean(data(d, 3, 4, dtype=torch.complex64), 0, keepdim=True), True),
    ("batch_norm.train", lambda d: bn(d, (4, 3), True), True),
    ("batch_norm.train_4d", lambda d: bn(d, (2, 3, 4, 4), True), True),
    ("batch_norm.eval", lambda d: bn(d, (2, 3, 4, 4), False), True),
    ("batch_norm.channels_last", lambda d: bn(d, (2, 3, 4, 4), True, layout=channels_last), True),
    ("batch_norm.bfloat16_float_params", lambda d: bn(d, (2, 3, 4), True, dtype=torch.bfloat16), True),
    ("batch_norm.transposed", lambda d: bn(d, (5, 3), True, layout=transposed), False),
]


def as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def assert_same(ours, expected):
    assert len(ours) == len(expected)
    for o, e in zip(ours, expected):
        assert o.device.type == "spyre"
        assert (o.shape, o.stride(), o.dtype) == (e.shape, e.stride(), e.dtype)
        assert torch.equal(o.cpu(), e)


def returns_while_gated(fn):
    """Whether fn() returns while a gate blocks the current stream (queued),
    rather than waiting for it (run at the call)."""
    s = torch.spyre.Stream()
    returned = threading.Event()

    def call():
        with s:
            fn()
        returned.set()

    with Gate() as gate:
        gate.block(s)
        thread = threading.Thread(target=call)
        thread.start()
        try:
            queued = returned.wait(timeout=5)  # a queued call returns at once
        finally:
            gate.release()
            thread.join(timeout=60)
    s.synchronize()
    return queued


@pytest.mark.parametrize("name, fn, queued", CASES, ids=[c[0] for c in CASES])
def test_results_match_cpu_in_layout_and_value(name, fn, queued):
    expected = as_tuple(fn("cpu"))
    assert_same(as_tuple(fn("spyre")), expected)
    assert_same(as_tuple(fn("spyre")), expected)  # the second call uses the plan


@pytest.mark.parametrize("name, fn", [(n, f) for n, f, q in CASES if q], ids=[n for n, _, q in CASES if q])
def test_inferred_ops_are_queued(name, fn):
    fn("spyre")  # a signature's first call runs at once (verification)
    torch.spyre.synchronize()
    assert returns_while_gated(lambda: fn("spyre"))


# (name, fn(device)): errors CPU raises; spyre raises the same, at the call.
ERRORS = [
    ("flip.repeated_dim", lambda d: data(d, 3, 4).flip(0, 0)),
    ("dot.2d", lambda d: torch.dot(data(d, 3, 3), data(d, 3, 3))),
    ("dot.dtypes", lambda d: torch.dot(data(d, 3), data(d, 3, dtype=torch.float64))),
    ("dot.lengths", lambda d: torch.dot(data(d, 3), data(d, 4))),
    ("dot.bool", lambda d: torch.dot(data(d, 3) > 0, data(d, 3) > 0)),
    ("var.int", lambda d: data(d, 3, dtype=torch.int64).var()),
    ("var.dim_out_of_range", lambda d: data(d, 3).var(dim=2)),
    ("where.float_condition", lambda d: torch.where(data(d, 3), data(d, 3), data(d, 3))),
    ("hardtanh.bool", lambda d: F.hardtanh(data(d, 3) > 0)),
    ("batch_norm.int", lambda d: torch.native_batch_norm(
        data(d, 2, 3, dtype=torch.int32), None, None, None, None, True, 0.1, 1e-5)),
    ("batch_norm.1d", lambda d: torch.native_batch_norm(data(d, 3), None, None, None, None, True, 0.1, 1e-5)),
    ("conv2d.channels", lambda d: F.conv2d(data(d, 1, 3, 5, 5), data(d, 2, 4, 3, 3))),
    ("conv2d.kernel_too_large", lambda d: F.conv2d(data(d, 1, 3, 2, 2), data(d, 2, 3, 3, 3))),
    ("conv2d.groups", lambda d: F.conv2d(data(d, 1, 4, 5, 5), data(d, 3, 2, 3, 3), groups=2)),
    # Checks that are not about shapes, after a valid call of the same signature
    # (verified, so no scratch run would catch them): still refused at the call.
    ("conv_transpose2d.output_padding_too_big", lambda d: (
        F.conv_transpose2d(data(d, 1, 2, 4, 4), data(d, 2, 3, 3, 3)),
        F.conv_transpose2d(data(d, 1, 2, 4, 4), data(d, 2, 3, 3, 3), stride=2, output_padding=2))),
    ("conv2d.negative_padding", lambda d: (
        F.conv2d(data(d, 1, 2, 5, 5), data(d, 3, 2, 3, 3)),
        F.conv2d(data(d, 1, 2, 5, 5), data(d, 3, 2, 3, 3), padding=-1))),
    ("conv2d.zero_stride", lambda d: (
        F.conv2d(data(d, 1, 2, 5, 5), data(d, 3, 2, 3, 3)),
        F.conv2d(data(d, 1, 2, 5, 5), data(d, 3, 2, 3, 3), stride=0))),
]


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the exact type is compared)
        return type(e), str(e)
    return None


@pytest.mark.parametrize("name, fn", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_are_cpus(name, fn):
    expected = error_of(lambda: fn("cpu"))
    assert expected is not None
    assert error_of(lambda: fn("spyre")) == expected
    torch.spyre.synchronize()  # nothing was left failed on the stream


# Every case, in a fresh interpreter: none imports the compiler stack (the
# Python meta kernels these rules replace import sympy or torch._dynamo).
FRESH = f"""
import sys
sys.path[:0] = {[str(__import__("pathlib").Path(__file__).parent), str(ROOT / "test")]!r}  # this file, _helpers
import torch
from test_meta_rules import CASES
for name, fn, queued in CASES:
    fn("spyre")
torch.spyre.synchronize()
print([m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules])
"""


def test_no_case_imports_the_compiler_stack():
    from conftest import run_python

    assert run_python(FRESH, fresh=True).stdout.splitlines()[-1] == "[]"


# Common ops beyond the rules' cases (matmuls, norms, reductions, losses,
# pooling, indexing, optimizer steps, attention), in a fresh interpreter.
COMMON = """
import sys
import torch
import torch.nn.functional as F
x = torch.randn(8, 8).to("spyre"); y = torch.randn(8, 8).to("spyre"); v = torch.randn(8).to("spyre")
ops = {
 "where": lambda: torch.where(x > 0, x, y),
 "flip": lambda: x.flip(0),
 "roll": lambda: x.roll(1, 0),
 "std": lambda: x.std(0),
 "var": lambda: x.var(),
 "dot": lambda: v.dot(v),
 "hardtanh": lambda: F.hardtanh(x),
 "batch_norm": lambda: F.batch_norm(x, torch.zeros(8).to("spyre"), torch.ones(8).to("spyre"), training=True),
 "sdpa": lambda: F.scaled_dot_product_attention(x[None], y[None], y[None]),
 "cumsum": lambda: x.cumsum(0),
 "topk": lambda: x.topk(3),
 "sort": lambda: x.sort(),
 "clamp": lambda: x.clamp(-1, 1),
 "pow": lambda: x.pow(2),
 "mean": lambda: x.mean(),
 "max": lambda: x.max(0),
 "cat": lambda: torch.cat([x, y]),
 "stack": lambda: torch.stack([x, y]),
 "embedding": lambda: F.embedding(torch.tensor([1, 2]).to("spyre"), x),
 "cross_entropy": lambda: F.cross_entropy(x, torch.tensor([1]*8).to("spyre")),
 "mse": lambda: F.mse_loss(x, y),
 "dropout": lambda: F.dropout(x, 0.5),
 "silu": lambda: F.silu(x),
 "tanh": lambda: torch.tanh(x),
 "bmm": lambda: torch.bmm(x[None], y[None]),
 "linear": lambda: F.linear(x, y, v),
 "addcmul_": lambda: x.clone().addcmul_(x, y),
 "lerp_": lambda: x.clone().lerp_(y, 0.5),
 "adam_foreach": lambda: torch._foreach_add_([x.clone()], [y]),
 "max_pool2d": lambda: F.max_pool2d(x[None, None], 2),
 "avg_pool2d": lambda: F.avg_pool2d(x[None, None], 2),
 "interpolate": lambda: F.interpolate(x[None, None], scale_factor=2),
 "pad": lambda: F.pad(x, (1, 1)),
 "gather": lambda: x.gather(1, torch.zeros(8, 2, dtype=torch.long).to("spyre")),
 "scatter_add": lambda: x.scatter_add(1, torch.zeros(8, 2, dtype=torch.long).to("spyre"), y[:, :2]),
 "index_put_": lambda: x.clone().index_put_((torch.tensor([1]).to("spyre"),), v),
 "masked_select": lambda: x.masked_select(x > 0),
 "argmax": lambda: x.argmax(),
 "norm": lambda: x.norm(),
 "logsumexp": lambda: x.logsumexp(0),
 "log_softmax": lambda: F.log_softmax(x, 1),
 "group_norm": lambda: F.group_norm(x[None], 2),
 "einsum": lambda: torch.einsum("ij,jk->ik", x, y),
 "triu": lambda: x.triu(),
 "repeat": lambda: x.repeat(2, 1),
 "expand_copy": lambda: x[:, :1].expand(8, 8).contiguous(),
 "zeros_like": lambda: torch.zeros_like(x),
 "arange": lambda: torch.arange(10, device="spyre"),
 "rand": lambda: torch.rand(4, device="spyre"),
 "randn_like": lambda: torch.randn_like(x),
 "sgd_step": lambda: x.clone().add_(y, alpha=-0.1),
 "clip_grad": lambda: torch.nn.utils.clip_grad_norm_([torch.nn.Parameter(x.clone())], 1.0),
}
for name, fn in ops.items():
    fn()
torch.spyre.synchronize()
print(len(ops), [m for m in ("torch._dynamo", "torch._inductor", "sympy") if m in sys.modules])
"""


def test_no_common_op_imports_the_compiler_stack():
    from conftest import run_python

    assert run_python(COMMON, fresh=True).stdout.splitlines()[-1] == "52 []"


@pytest.mark.parametrize(
    "expr",
    [
        "torch.randn(2, 3, device=d) @ torch.randn(4, 5, device=d)",  # at::meta::mm
        "torch.relu(torch.ones(3, dtype=torch.bool, device=d))",  # relu's own rule
        "torch.nn.functional.layer_norm(torch.randn(2, 3, device=d), (4,))",  # layer_norm's rule
        "torch.randn(2, 3, device=d).sum(dim=5)",  # at::meta::sum
        "torch.randn(2, 3, device=d).masked_fill_(torch.ones(3, device=d), 0.0)",  # its rule
        "torch.randn(2, 3, device=d).masked_fill_(torch.ones(4, device=d) > 0, 0.0)",
    ],
    ids=["mm", "relu-bool", "layer_norm", "sum", "masked_fill-mask-dtype", "masked_fill-shape"],
)
def test_meta_errors_are_cpus(expr):
    # A C++ meta kernel raises at the call what CPU's kernel raises, word for word.
    code = f"""
import torch
def error(d):
    try:
        {expr}
    except Exception as e:
        return type(e).__name__ + ": " + str(e).split(chr(10))[0]
    return "no error"
print(error("spyre"))
print(error("cpu"))
"""
    spyre, cpu = run_python(code).stdout.splitlines()
    assert spyre == cpu
    assert spyre != "no error"
