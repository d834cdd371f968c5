"""Issue 49, item 1: a scalar argument a CPU kernel cannot convert to its
tensors' dtype raises at the call with CPU's message, and the device stays
usable. A plan's verified signature carries each scalar's class (the dtypes
its value overflows, its sign), not only its type: a value of a new class is
checked by the kernel on the host before anything is queued
(csrc/launch/scalar_class.h)."""

import threading

import pytest
import torch

import torch_spyre  # noqa: F401
from torch_spyre import _C
from conftest import run_python

pytestmark = pytest.mark.timeout(120)

MASK = [True, False, True, False]

# (name, op(x, m, v)): ops whose CPU kernels convert a scalar to the tensor's dtype.
OPS = [
    ("masked_fill_", lambda x, m, v: x.masked_fill_(m, v)),
    ("masked_fill", lambda x, m, v: x.masked_fill(m, v)),
    ("masked_fill_tensor_value", lambda x, m, v: x.masked_fill(m, torch.tensor(v))),
    ("fill_", lambda x, m, v: x.fill_(v)),
    ("full_like", lambda x, m, v: torch.full_like(x, v)),
    ("threshold", lambda x, m, v: torch.nn.functional.threshold(x, 0.5, v)),
    ("clamp_min", lambda x, m, v: torch.clamp(x, min=v)),
    ("clamp_max", lambda x, m, v: torch.clamp(x, max=v)),
    ("hardtanh", lambda x, m, v: torch.nn.functional.hardtanh(x, -abs(v), abs(v))),
    ("index_fill_", lambda x, m, v: x.index_fill_(0, torch.tensor([1], device=x.device), v)),
    ("scatter_value", lambda x, m, v: x.scatter_(0, torch.tensor([1], device=x.device), v)),
    ("where_scalar", lambda x, m, v: torch.where(m, x, v)),
    ("addcmul_value", lambda x, m, v: torch.addcmul(x, x, x, value=v)),
    ("add_alpha", lambda x, m, v: torch.add(x, x, alpha=v)),
    ("pow_scalar", lambda x, m, v: torch.pow(x, v)),
]

# dtype -> (a value that fits, values that overflow it on CPU, in either type)
VALUES = {
    torch.float16: (-100.0, [-1e9, 70000.0, 1e10, 1 + 2j]),
    torch.bfloat16: (-100.0, [1e39, -1e39, 1 + 2j]),
    torch.int8: (3, [300, -129, 300.0, float("nan"), 1 + 2j]),
    torch.uint8: (3, [300, 256.0, -1.0, -300]),
    torch.bool: (1, [2.0, 1e39, 1 + 2j]),
}


def _outcome(fn):
    try:
        out = fn()
    except Exception as e:  # noqa: BLE001: compared with the device's
        return type(e), str(e).split("\n")[0]
    return out.cpu() if isinstance(out, torch.Tensor) else out


C10_NAMES = {torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}


def _check(name, op, dtype, value, x_cpu):
    m_cpu = torch.tensor(MASK)
    expected = _outcome(lambda: op(x_cpu.clone(), m_cpu, value))
    if (name == "where_scalar" and dtype in C10_NAMES and not isinstance(expected, tuple)
            and not isinstance(value, complex) and abs(value) > torch.finfo(dtype).max):
        # torch's where(cond, x, scalar) makes the scalar a tensor of x's dtype
        # on every device but the CPU (aten::scalar_tensor, then fill_), which
        # checks the conversion: CUDA raises this too; CPU stores -inf.
        expected = (RuntimeError, f"value cannot be converted to type {C10_NAMES[dtype]} without overflow")
    x = x_cpu.to("spyre")
    m = m_cpu.to("spyre")
    if isinstance(expected, tuple):
        exc, message = expected
        with pytest.raises(exc) as info:
            op(x, m, value)
        assert str(info.value).split("\n")[0] == message, (name, dtype, value)
        assert torch.equal(x.cpu(), x_cpu), (name, dtype, value)  # nothing written
    else:
        got = op(x, m, value).cpu()
        torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True,
                                   msg=f"{name} {dtype} {value}")


@pytest.mark.parametrize("dtype", list(VALUES), ids=str)
@pytest.mark.parametrize("name,op", OPS, ids=[n for n, _ in OPS])
def test_a_bad_scalar_raises_at_the_call_and_leaves_the_device_usable(name, op, dtype):
    good, bad = VALUES[dtype]
    x_cpu = torch.tensor([1, 0, 2, 1], dtype=dtype)
    _check(name, op, dtype, good, x_cpu)  # verifies the op's signature for a fitting value
    for value in bad:
        _check(name, op, dtype, value, x_cpu)
        _check(name, op, dtype, value, x_cpu)  # again: a failed value is never taken as verified
        _check(name, op, dtype, good, x_cpu)
    # The default stream took no error: later work runs and syncs.
    y = torch.ones(4, dtype=dtype, device="spyre")
    torch.spyre.synchronize()
    assert torch.equal((y * 1).cpu(), torch.ones(4, dtype=dtype))


def test_the_masked_fill_of_an_attention_mask_under_float16_raises_at_the_call():
    # The case: -100.0 verifies the signature; -1e9 must not be queued unchecked.
    scores = torch.zeros(2, 3, dtype=torch.float16, device="spyre")
    mask = torch.tensor([[True, False, False], [False, False, True]], device="spyre")
    assert scores.masked_fill(mask, -100.0).cpu().tolist() == [[-100.0, 0.0, 0.0], [0.0, 0.0, -100.0]]
    with pytest.raises(RuntimeError, match=r"^value cannot be converted to type c10::Half without overflow$"):
        scores.masked_fill_(mask, -1e9)
    with pytest.raises(RuntimeError, match=r"^value cannot be converted to type c10::Half without overflow$"):
        scores.masked_fill(mask, torch.tensor(-1e9))
    torch.spyre.synchronize()
    assert scores.masked_fill(mask, -6e4).cpu().tolist() == [[-60000.0, 0.0, 0.0], [0.0, 0.0, -60000.0]]
    assert scores.masked_fill(mask, float("-inf")).cpu().tolist() == [
        [float("-inf"), 0.0, 0.0], [0.0, 0.0, float("-inf")]]


def test_an_attention_mask_written_under_float16_autocast_raises_at_the_call():
    q = torch.ones(2, 4, device="spyre")
    mask = torch.tensor([[True, False], [False, True]], device="spyre")
    with torch.autocast("spyre", dtype=torch.float16):
        scores = q @ q.t()  # float16 under autocast
        assert scores.dtype == torch.float16
        assert scores.masked_fill(mask, -1e4).cpu().tolist() == [[-1e4, 4.0], [4.0, -1e4]]
        with pytest.raises(RuntimeError, match=r"^value cannot be converted to type c10::Half without overflow$"):
            scores.masked_fill(mask, -1e9)
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    assert probs.cpu().tolist() == [[0.0, 1.0], [1.0, 0.0]]


def test_scalar_tensor_values_of_one_class_share_a_plan_and_keep_their_values():
    # A 0-dim CPU value enters the plan's key by its class, not its bits: a
    # second value of the class is queued (no meta run) with its own value.
    x = torch.zeros(3, dtype=torch.float16, device="spyre")
    m = torch.tensor([True, False, True], device="spyre")
    assert x.masked_fill(m, torch.tensor(-3.0)).cpu().tolist() == [-3.0, 0.0, -3.0]
    before = _C._plan_counts()
    assert x.masked_fill(m, torch.tensor(-5.0)).cpu().tolist() == [-5.0, 0.0, -5.0]
    assert _C._plan_counts() == before
    with pytest.raises(RuntimeError, match="c10::Half without overflow"):
        x.masked_fill(m, torch.tensor(-7e4))
    assert x.masked_fill(m, torch.tensor(7.0)).cpu().tolist() == [7.0, 0.0, 7.0]


def test_bad_scalars_on_two_threads_raise_on_their_own_thread():
    # Plans are per thread, verified signatures per process: a value checked
    # on one thread must not let another thread's bad value through.
    x = torch.zeros(4, dtype=torch.float16, device="spyre")
    m = torch.tensor(MASK, device="spyre")
    results = {}

    def good():
        results["good"] = x.masked_fill(m, -100.0).cpu().tolist()

    def bad():
        try:
            x.masked_fill(m, -1e9)
        except RuntimeError as e:
            results["bad"] = str(e)

    for target in (good, bad):  # one after the other: the order is the point
        t = threading.Thread(target=target)
        t.start()
        t.join(60)
        assert not t.is_alive()
    assert results == {"good": [-100.0, 0.0, -100.0, 0.0],
                       "bad": "value cannot be converted to type c10::Half without overflow"}
    torch.spyre.synchronize()
    assert x.masked_fill(m, 2.0).cpu().tolist() == [2.0, 0.0, 2.0, 0.0]


def test_a_bad_scalar_under_the_card_rules_leaves_the_device_usable():
    proc = run_python(
        """
        import torch, torch_spyre
        assert torch.spyre.card_rules()
        x = torch.zeros(4, dtype=torch.float16, device="spyre")
        m = torch.tensor([True, False, True, False], device="spyre")
        print(x.masked_fill(m, -100.0).cpu().tolist())
        for fn in (lambda: x.masked_fill_(m, -1e9),
                   lambda: torch.nn.functional.threshold(x, 0.5, 1e10),
                   lambda: x.index_fill_(0, torch.tensor([1], device="spyre"), 1e10),
                   lambda: torch.zeros(4, dtype=torch.int8, device="spyre").masked_fill(m, 300)):
            try:
                fn()
            except RuntimeError as e:
                print(e)
        torch.spyre.synchronize()
        print(x)
        """,
        env={"TORCH_SPYRE_CARD_RULES": "1"},
    )
    assert proc.stdout.splitlines() == [
        "[-100.0, 0.0, -100.0, 0.0]",
        "value cannot be converted to type c10::Half without overflow",
        "value cannot be converted to type c10::Half without overflow",
        "value cannot be converted to type c10::Half without overflow",
        "value cannot be converted to type int8_t without overflow",
        "tensor([0., 0., 0., 0.], device='spyre:0', dtype=torch.float16)",
    ]
