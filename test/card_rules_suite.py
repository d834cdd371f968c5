"""The card-rules tier: run with TORCH_SPYRE_CARD_RULES=1 (test/memory/test_card_rules.py runs this
file so in a subprocess; by hand:
TORCH_SPYRE_CARD_RULES=1 python -m pytest test/card_rules_suite.py).
The file name does not match test_*.py, so the ordinary run, where the switch is off, does not
collect it.

It checks, with exact values and messages, the behaviour upstream torch-spyre's tests expect of
a card (tests/test_spyre.py, class TestSpyre: test_allocation_and_copy_dtypes,
test_cross_device_copy_dtypes, test_cross_device_copy_scalar_fill with zeros and ones,
test_warning_emitted_when_enabled, test_allocation_size): float64 refused at allocation and at
host copies, each card dtype allocated and copied both ways bit for bit (int64 through int32,
with the downcast warning), zero and one scalars likewise, the warning given when enabled and
silent when disabled, a 128-byte stick for two float16 values; and each card rule beyond those.
Upstream's code is not here: its tests were run against this tier's switch by hand
(docs/development.md, "Tests")."""

import math
import os
import re
import warnings
from contextlib import contextmanager

import pytest
import torch
from torch.testing._internal.common_utils import set_warn_always_context

from _printing import wide_lines, with_device

if os.environ.get("TORCH_SPYRE_CARD_RULES") != "1":
    pytest.skip("the card-rules tier runs with TORCH_SPYRE_CARD_RULES=1", allow_module_level=True)


CARD_DTYPES = (
    "torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64 (stored as int32), "
    "torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2fnuz"
)
DOWNCAST_WARNING = (
    "spyre: a Spyre card does not support int64; int64 tensors are stored as int32 on the device "
    "(TORCH_SPYRE_CARD_RULES=1), so values outside the int32 range change: they keep their low 32 "
    "bits (2**31 becomes -2**31). Silence this with torch.spyre.set_downcast_warning(False), "
    "warnings.filterwarnings(...) or TORCH_SPYRE_DOWNCAST_WARN=0."
)


def refused(what, dtype):
    """The exact RuntimeError message for a dtype the card does not hold."""
    return re.escape(f"spyre cannot {what} dtype {dtype}: a Spyre card does not support it "
                     f"(TORCH_SPYRE_CARD_RULES=1); the card supports {CARD_DTYPES}") + "$"


@contextmanager
def recorded_warnings():
    """Every warning, TORCH_WARN_ONCE ones included (as upstream's tests record them)."""
    with set_warn_always_context(True), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        yield rec


def downcast_warnings(rec):
    # The C++ warning ends with where it was raised: "(Triggered internally at ...)".
    return [w for w in rec if str(w.message).startswith(DOWNCAST_WARNING)]


def card_values(dtype):
    """64x64 values `dtype` holds exactly (floats are rounded on the host), so a copy to the device
    and back must give the same bits; int64 ones stay in int16's range, which int32 keeps, and
    float16 ones are bfloat16 values, which DLFloat16 holds too (the tier's numerics)."""
    if dtype == torch.bool:
        values = torch.arange(4096) % 3 == 0
    elif dtype == torch.int64:
        values = torch.arange(4096) * 16 - 32768
    elif dtype == torch.float16:
        values = torch.linspace(-3.0, 3.0, 4096).to(torch.bfloat16).to(dtype)
    elif dtype.is_floating_point:
        values = torch.linspace(-3.0, 3.0, 4096).to(dtype)
    else:
        values = (torch.arange(4096) % 256 - 128).to(dtype)
    return values.reshape(64, 64)


def same_bits(a, b):
    # Bytes, not values: exact for every dtype, float8 included (torch.equal lacks it).
    return (a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))


@pytest.fixture
def downcast_warning_on():
    # On during the test whatever ran before; on again after it, whatever the test set.
    torch.spyre.set_downcast_warning(True)
    yield
    torch.spyre.set_downcast_warning(True)


def test_the_switch_reads_on():
    assert torch.spyre.card_rules() is True


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex64, torch.uint16, torch.float8_e5m2])
def test_a_dtype_the_card_lacks_is_refused_at_allocation(dtype):
    for make in (lambda: torch.empty(64, dtype=dtype, device="spyre"),
                 lambda: torch.empty(64, dtype=dtype).to("spyre"),
                 lambda: torch.zeros(4, device="spyre").to(dtype)):
        with pytest.raises(RuntimeError, match="^" + refused("allocate a tensor of", dtype)):
            make()


# float16, float32, bool, int8, bfloat16: upstream's allocation list; float8_e4m3fn and int64:
# its copy list.
ROUND_TRIP_DTYPES = [torch.float16, torch.float32, torch.bool, torch.int8, torch.bfloat16,
                     torch.float8_e4m3fn, torch.int64]


@pytest.mark.parametrize("dtype", ROUND_TRIP_DTYPES)
def test_a_card_dtype_allocates_and_copies_both_ways_bit_for_bit(dtype, downcast_warning_on):
    allocated = torch.empty(64, dtype=dtype, device="spyre")
    assert (allocated.device.type, allocated.dtype, allocated.shape) == ("spyre", dtype, (64,))
    fetched = allocated.cpu()
    assert (fetched.device.type, fetched.dtype, fetched.shape) == ("cpu", dtype, (64,))

    host = card_values(dtype)
    with recorded_warnings() as rec:
        sent = host.to("spyre")
    assert (sent.device.type, sent.dtype) == ("spyre", dtype)
    assert same_bits(sent.cpu(), host)
    expected_warnings = 1 if dtype == torch.int64 else 0  # int64 narrows, even to equal values
    assert len(downcast_warnings(rec)) == len(rec) == expected_warnings


@pytest.mark.parametrize("factory, value", [(torch.zeros, 0), (torch.ones, 1)],
                         ids=["zeros", "ones"])
@pytest.mark.parametrize("dtype", [torch.int8, torch.bool, torch.int64, torch.float8_e4m3fn,
                                   torch.float16, torch.float32])
def test_zero_and_one_scalars_copy_both_ways(factory, value, dtype, downcast_warning_on):
    host = factory((), dtype=dtype)
    with recorded_warnings() as rec:
        sent = host.to("spyre")
    assert (sent.device.type, sent.dtype, sent.ndim, sent.numel()) == ("spyre", dtype, 0, 1)
    back = sent.cpu()
    assert (back.dtype, back.ndim, back.numel()) == (dtype, 0, 1)
    assert same_bits(back, host) and back.float().item() == value
    assert len(downcast_warnings(rec)) == len(rec) == (1 if dtype == torch.int64 else 0)
    # The same scalar filled on the device (no copy, and 0 and 1 fit int32: no warning).
    with recorded_warnings() as rec:
        filled = factory((), dtype=dtype, device="spyre")
    assert same_bits(filled.cpu(), host)
    assert [str(w.message) for w in rec] == []


def test_an_op_whose_result_the_card_lacks_is_refused():
    with pytest.raises(RuntimeError, match="^" + refused("allocate a tensor of", torch.float64)):
        torch.ones(3, device="spyre").sum(dtype=torch.float64)


def test_copies_refuse_a_host_side_dtype_the_card_lacks():
    device = torch.zeros(4, device="spyre")
    message = "^" + refused("copy to or from a cpu tensor of", torch.float64)
    with pytest.raises(RuntimeError, match=message):
        device.copy_(torch.ones(4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=message):
        torch.ones(4, dtype=torch.float64).copy_(device)
    assert device.cpu().tolist() == [0.0] * 4  # nothing was copied


def test_int64_is_stored_as_int32_values_narrowed_as_a_c_cast(downcast_warning_on):
    values = [2**31 - 1, 2**31, -(2**31) - 1, -(2**31), 2**40 + 3, -(2**35), 0, -1]
    host = torch.tensor(values, dtype=torch.int64)
    with recorded_warnings() as rec:
        device = host.to("spyre")
    assert device.dtype == torch.int64  # the tensor reports int64, as upstream's tests expect
    back = device.cpu()
    assert back.dtype == torch.int64
    assert back.tolist() == [2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 3, 0, 0, -1]
    assert back.tolist() == host.to(torch.int32).tolist()  # CPU's own int64 -> int32 conversion
    assert len(downcast_warnings(rec)) == 1 and len(rec) == 1
    assert rec[0].category is UserWarning


def test_the_downcast_warning_when_enabled_names_int64_once_per_copy(downcast_warning_on):
    torch.spyre.set_downcast_warning(True)
    assert torch.spyre.get_downcast_warning() is True
    host = card_values(torch.int64)
    with recorded_warnings() as rec:
        sent = host.to("spyre")
        sent_again = host.to("spyre")  # warn-always mode: each copy warns
    assert len(downcast_warnings(rec)) == len(rec) == 2
    assert "does not support int64" in str(rec[0].message)
    assert torch.equal(sent.cpu(), host) and torch.equal(sent_again.cpu(), host)


def test_set_downcast_warning_false_silences_the_warning_not_the_narrowing(downcast_warning_on):
    torch.spyre.set_downcast_warning(False)
    assert torch.spyre.get_downcast_warning() is False
    with recorded_warnings() as rec:
        back = torch.tensor([2**31], dtype=torch.int64).to("spyre").cpu()
    assert back.tolist() == [-(2**31)]
    assert [str(w.message) for w in rec] == []


def test_copies_that_do_not_narrow_do_not_warn():
    with recorded_warnings():
        device = torch.tensor([2**31 - 1, -(2**31)], dtype=torch.int64).to("spyre")
    with recorded_warnings() as rec:
        int32 = torch.tensor([7, -7], dtype=torch.int32).to("spyre")
        assert device.cpu().tolist() == [2**31 - 1, -(2**31)]  # device to host
        copy = device.clone()  # int64 to int64 on the device: already int32 values
        same = torch.empty(2, dtype=torch.int64, device="spyre").copy_(device)
    assert [str(w.message) for w in rec] == []
    assert int32.cpu().tolist() == [7, -7]
    assert copy.cpu().tolist() == same.cpu().tolist() == [2**31 - 1, -(2**31)]


def test_a_conversion_into_int64_on_the_device_narrows():
    big = torch.full((3,), 3e9, device="spyre")
    with recorded_warnings() as rec:
        narrowed = big.to(torch.int64)
    assert narrowed.cpu().tolist() == [3_000_000_000 - 2**32] * 3
    assert len(downcast_warnings(rec)) == 1


def test_fills_of_int64_narrow_and_warn_only_when_the_value_changes():
    with recorded_warnings() as rec:
        inside = torch.full((2,), 2**31 - 1, dtype=torch.int64, device="spyre")
    assert [str(w.message) for w in rec] == []
    with recorded_warnings() as rec:
        outside = torch.full((2,), 2**31, dtype=torch.int64, device="spyre")
        strided = torch.zeros(4, dtype=torch.int64, device="spyre")
        strided[::2].fill_(-(2**31) - 1)  # not dense: the CPU fill on the device timeline
    assert len(downcast_warnings(rec)) == 2
    assert inside.cpu().tolist() == [2**31 - 1] * 2
    assert outside.cpu().tolist() == [-(2**31)] * 2
    assert strided.cpu().tolist() == [2**31 - 1, 0, 2**31 - 1, 0]


def test_random_int64_draws_are_narrowed():
    drawn = torch.randint(2**31, 2**31 + 1, (4,), dtype=torch.int64, device="spyre")
    assert drawn.cpu().tolist() == [-(2**31)] * 4


def test_int64_arithmetic_on_the_device_is_not_narrowed():
    # Not emulated (docs/tensors.md, "Running like a card"): ops compute int64
    # results in 64 bits; a card computes them in int32.
    with recorded_warnings():
        x = torch.tensor([2**30], dtype=torch.int64, device="spyre")
    assert (x * 4).cpu().tolist() == [2**32]
    assert torch.arange(3, device="spyre").argmax().cpu().item() == 2


@pytest.mark.parametrize("make, nbytes", [
    (lambda: torch.tensor(1.0, device="spyre"), 128),
    (lambda: torch.empty(0, device="spyre"), 0),
    (lambda: torch.empty(32, device="spyre"), 128),
    (lambda: torch.empty(33, device="spyre"), 256),
    (lambda: torch.empty(2, dtype=torch.int64, device="spyre"), 128),
    (lambda: torch.empty_strided((2,), (2,), dtype=torch.float16, device="spyre"), 128),
    (lambda: torch.ones(3, device="spyre") + 1, 128),  # an op's result
    (lambda: torch.ones(100, dtype=torch.int8).to("spyre"), 128),
])
def test_allocations_come_in_128_byte_sticks(make, nbytes):
    assert make().untyped_storage().nbytes() == nbytes


def test_two_float16_values_take_a_stick_where_cpu_takes_their_four_bytes():
    on_device = torch.tensor([1, 2], dtype=torch.float16, device="spyre")
    assert on_device.untyped_storage().nbytes() == 128
    assert torch.tensor([1, 2], dtype=torch.float16).untyped_storage().nbytes() == 4


def test_a_tensor_that_grows_grows_in_sticks():
    t = torch.ones(2, device="spyre")
    t.resize_(33)
    assert t.untyped_storage().nbytes() == 256
    assert t[:2].cpu().tolist() == [1.0, 1.0]
    out = torch.empty(0, device="spyre")
    torch.add(torch.ones(3, device="spyre"), 1, out=out)  # an out= result resized by the op
    assert out.untyped_storage().nbytes() == 128
    assert out.cpu().tolist() == [2.0, 2.0, 2.0]


def test_an_explicit_storage_resize_keeps_the_bytes_asked_for():
    # What FSDP2 does with parameter storages: resize_(0) frees, resize_(n) must give n.
    storage = torch.ones(2, device="spyre").untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == 0
    storage.resize_(12)
    assert storage.nbytes() == 12


def test_the_capability_lists_the_card_set():
    card = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
            torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2fnuz}
    assert torch.accelerator.get_device_capability("spyre")["supported_dtypes"] == card
    assert torch.spyre.get_device_capability()["supported_dtypes"] == card


# ---------------------------------------------------------------- device layouts


@pytest.mark.parametrize("make, nbytes", [
    (lambda: torch.empty(512, 240, dtype=torch.float16, device="spyre"), 262144),  # 4 sticks a row
    (lambda: torch.empty(3, 5, device="spyre"), 384),  # a stick per row (CPU: 60 bytes)
    (lambda: torch.empty(65, dtype=torch.bool, device="spyre"), 256),  # DLFloat16 on the card
    (lambda: torch.empty(33, dtype=torch.uint8, device="spyre"), 256),  # 32-bit on the card
    (lambda: torch.empty(2, 3, 4, dtype=torch.int8, device="spyre"), 768),
    (lambda: torch.empty(100, dtype=torch.int64, device="spyre"), 896),  # strided bytes: larger
    (lambda: torch.ones(512, 240, dtype=torch.float16).to("spyre"), 262144),
    (lambda: torch.ones(512, 240, dtype=torch.float16, device="spyre") + 1, 262144),  # a result
    (lambda: torch.ones(512, 240, dtype=torch.float16, device="spyre")[:, :5], 262144),  # a view
])
def test_an_allocation_holds_the_default_stick_layout(make, nbytes):
    assert make().untyped_storage().nbytes() == nbytes


def test_the_padding_is_device_memory_in_the_stats_the_snapshot_and_the_summary(empty_device):
    x = torch.empty(512, 240, dtype=torch.float16, device="spyre")
    assert torch.accelerator.memory_allocated() == 262144
    stats = torch.accelerator.memory_stats()
    assert stats["requested_bytes.all.current"] == 262144
    blocks = [b for s in torch.spyre.memory._snapshot()["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"]
    assert [(b["address"], b["size"], b["requested_size"]) for b in blocks] == [
        (x.data_ptr(), 262144, 262144)]
    allocated = [line for line in torch.spyre.memory_summary().splitlines()
                 if line.startswith("| Allocated memory")]
    assert allocated[0].split("|")[2].split() == ["262144", "B"]  # torch.cuda's units


def test_an_explicit_layout_allocates_its_sticks(empty_device):
    fp16 = torch.spyre.get_device_dtype(torch.float16)
    padded = torch.spyre.SpyreTensorLayout([1, 512, 64], [64, 60, 1], fp16)
    x = torch.ones(40, 60, dtype=torch.float16)
    on_device = x.to(device_layout=padded)
    assert on_device.untyped_storage().nbytes() == 65536  # 512 sticks where CPU has 4800 bytes
    assert torch.accelerator.memory_allocated() == 65536
    assert torch.equal(on_device.cpu(), x)
    transposed = torch.spyre.SpyreTensorLayout([512, 256], [256, 1], torch.float16, [1, 0])
    assert torch.empty(512, 256, dtype=torch.float16,
                       device_layout=transposed).untyped_storage().nbytes() == 262144


def test_kernels_on_padded_tensors_compute_cpus_values():
    # Integers below 1024 (and their doubles) are DLFloat16 values: the tier's numerics keep them.
    x = (torch.arange(512 * 240, dtype=torch.float32) % 1024).reshape(512, 240).to(torch.float16)
    on_device = x.to("spyre")
    assert torch.equal((on_device[:, 3:7] * 2).cpu(), x[:, 3:7] * 2)
    assert torch.equal(on_device.sum(dim=1, dtype=torch.float32).cpu(),
                       x.sum(dim=1, dtype=torch.float32))


# ---------------------------------------------------------------- DLFloat16 numerics


def test_float16_and_bfloat16_hold_dlfloat16_values_under_the_card_rules():
    """The card rules' default numerics (docs/tensors.md, "DLFloat16"): 1025 and -2.001953125
    are float16 ties, rounded away from zero by the nnp1 profile; 65504 rounds to 65536, past
    float16's range; a bfloat16 above 8.57e9 becomes the NaN/infinity code. float32 stays IEEE."""
    assert torch.spyre.numerics() == "dl16:nnp1"
    torch.spyre.numerics_report(reset=True)
    half = torch.tensor([1025.0, -2.001953125, 65504.0], dtype=torch.float16, device="spyre")
    assert half.cpu().tolist() == [1026.0, -2.00390625, math.inf]
    big = torch.tensor([2.0**30], dtype=torch.bfloat16, device="spyre") * 8
    assert math.isnan(big.item())
    assert (torch.tensor([1025.0], device="spyre") * 1).item() == 1025.0
    assert torch.spyre.numerics_report() == {"aten::copy_": 1, "aten::mul.out": 1}


# ------------------------------------------------ host reads and torch's own Python code

CARD_DTYPE_LIST = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                   torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn,
                   torch.float8_e5m2fnuz]


def test_print_of_a_float32_tensor_allocates_no_float64(capsys):
    # torch's formatter casts to float64 on the tensor's device; spyre's runs on a host copy.
    print(torch.ones(2, device="spyre"))
    assert capsys.readouterr().out == "tensor([1., 1.], device='spyre:0')\n"


@pytest.mark.parametrize("dtype", CARD_DTYPE_LIST, ids=str)
def test_every_card_dtype_prints_and_reads_back_on_the_host(dtype, downcast_warning_on):
    cpu = torch.tensor([[0.0, 1.5, -2.25], [3.0, 0.0625, 7.0]]).to(dtype)
    with recorded_warnings() as rec:
        dev = cpu.to("spyre")
    rec.clear()  # the copy into an int64 tensor warns (the rules); the reads below must not
    with recorded_warnings() as rec, wide_lines():
        assert repr(dev) == with_device(repr(cpu))
        assert str(dev[1]) == with_device(str(cpu[1]))
        assert repr(dev[0, 1]) == with_device(repr(cpu[0, 1]))
        assert dev.tolist() == cpu.tolist()
        assert dev[1, 2].item() == cpu[1, 2].item()
        assert f"{dev[0, 1]}" == f"{cpu[0, 1]}"
        assert bool(dev[0, 1]) is bool(cpu[0, 1])
    assert [str(w.message) for w in rec] == []


def test_numpy_of_a_spyre_tensor_names_the_copy_to_make():
    with pytest.raises(TypeError, match=re.escape(
            "can't convert spyre:0 device type tensor to numpy. Use Tensor.cpu() to copy the "
            "tensor to host memory first.")):
        torch.ones(2, device="spyre").numpy()


def test_two_threads_print_at_once():
    import threading

    tensors = [torch.arange(6.0, device="spyre").reshape(2, 3) * k for k in (1, 2)]
    texts = [None, None]

    def show(k):
        texts[k] = [repr(tensors[k]) for _ in range(20)]

    threads = [threading.Thread(target=show, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert texts[0] == ["tensor([[0., 1., 2.],\n        [3., 4., 5.]], device='spyre:0')"] * 20
    assert texts[1] == ["tensor([[ 0.,  2.,  4.],\n        [ 6.,  8., 10.]], device='spyre:0')"] * 20


def test_assert_close_allclose_and_isclose_compare_on_the_card(downcast_warning_on):
    a = torch.tensor([1.0, 2.0, 3.5], device="spyre")
    torch.testing.assert_close(a, a.clone())
    assert torch.allclose(a, a + 1e-7) is True
    assert torch.isclose(a, a + torch.tensor([0.0, 1.0, 0.0], device="spyre")).tolist() == [
        True, False, True]
    with pytest.raises(AssertionError, match=re.escape(
            "Tensor-likes are not close!\n\nMismatched elements: 1 / 3 (33.3%)\n"
            "Greatest absolute difference: 0.5 at index (2,) (up to 1e-05 allowed)\n"
            "Greatest relative difference: 0.125 at index (2,) (up to 1.3e-06 allowed)")):
        torch.testing.assert_close(a, torch.tensor([1.0, 2.0, 4.0], device="spyre"))
    # torch reports integer mismatches through int64 copies on the device: the card's
    # downcast warning comes with the report.
    i = torch.tensor([1, 2, 3], dtype=torch.int32, device="spyre")
    with recorded_warnings() as rec, pytest.raises(AssertionError, match=re.escape(
            "Tensor-likes are not equal!\n\nMismatched elements: 1 / 3 (33.3%)\n"
            "Greatest absolute difference: 2 at index (1,)\n"
            "Greatest relative difference: 0.5 at index (1,)")):
        torch.testing.assert_close(i, torch.tensor([1, 4, 3], dtype=torch.int32, device="spyre"))
    assert len(downcast_warnings(rec)) >= 1


@pytest.mark.parametrize("init, args", [
    ("uniform_", ()), ("normal_", ()), ("trunc_normal_", ()), ("xavier_uniform_", ()),
    ("xavier_normal_", ()), ("kaiming_uniform_", ()), ("kaiming_normal_", ()),
    ("orthogonal_", ()), ("eye_", ()), ("constant_", (0.25,)),
])
def test_nn_init_fills_what_cpu_fills(init, args):
    torch.manual_seed(0)
    on_device = getattr(torch.nn.init, init)(torch.empty(6, 4, device="spyre"), *args)
    torch.manual_seed(0)
    on_cpu = getattr(torch.nn.init, init)(torch.empty(6, 4), *args)
    assert torch.equal(on_device.cpu(), on_cpu)


def test_nn_init_sparse_zeroes_its_share_of_each_column(downcast_warning_on):
    # Its normal draws come from spyre's generator, its randperm from CPU's (as on CUDA); the
    # int64 row indices it writes through are copied to the device: the downcast warning.
    with recorded_warnings() as rec:
        weight = torch.nn.init.sparse_(torch.empty(6, 4, device="spyre"), 0.5)
    assert (weight == 0).sum(dim=0).cpu().tolist() == [3, 3, 3, 3]
    assert len(downcast_warnings(rec)) >= 1 and len(downcast_warnings(rec)) == len(rec)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "NAdam", "RAdam", "Adamax", "Adagrad",
                                  "RMSprop", "Rprop", "Adadelta", "ASGD"])
def test_optimizers_step_as_on_cpu_with_float32_counters(name):
    torch.manual_seed(0)
    cpu_model = torch.nn.Linear(3, 2)
    dev_model = torch.nn.Linear(3, 2).to("spyre")
    dev_model.load_state_dict(cpu_model.state_dict())
    kwargs = {"momentum": 0.9} if name == "SGD" else {}
    steps = []
    for model in (cpu_model, dev_model):
        device = next(model.parameters()).device
        # foreach: spyre's default (torch's foreach devices), given to CPU too: one algorithm.
        opt = getattr(torch.optim, name)(model.parameters(), lr=0.1, foreach=True, **kwargs)
        for k in range(3):
            opt.zero_grad()
            model(torch.full((2, 3), k + 1.0, device=device)).square().sum().backward()
            opt.step()
        steps.append({key: (value.dtype, value.device.type)
                      for key, value in opt.state[model.weight].items() if torch.is_tensor(value)})
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()):
        assert torch.equal(p_dev.detach().cpu(), p_cpu.detach()), name
    # No state of float64 (the card has none): counters are float32, on the host unless
    # capturable.
    assert all(dtype != torch.float64 for dtype, _ in steps[1].values())
    if "step" in steps[1]:
        assert steps[1]["step"] == (torch.float32, "spyre" if name == "ASGD" else "cpu")


@pytest.mark.parametrize("name", ["Adam", "AdamW", "NAdam", "RAdam", "Adamax", "RMSprop"])
def test_capturable_optimizers_count_steps_in_float32_on_the_device(name):
    model = torch.nn.Linear(3, 2).to("spyre")
    opt = getattr(torch.optim, name)(model.parameters(), lr=0.1, capturable=True)
    for _ in range(2):
        opt.zero_grad()
        model(torch.ones(2, 3, device="spyre")).sum().backward()
        opt.step()
    step = opt.state[model.weight]["step"]
    assert (step.dtype, step.device.type, step.item()) == (torch.float32, "spyre", 2.0)


def test_histc_and_histogram_count_on_the_card():
    x = torch.tensor([0.5, 1.5, 1.7, 3.9, 9.0], device="spyre")
    assert torch.histc(x, bins=4, min=0, max=4).cpu().tolist() == [1.0, 2.0, 0.0, 1.0]
    counts, edges = torch.histogram(x, bins=2)
    assert (counts.cpu().tolist(), edges.cpu().tolist()) == ([4.0, 1.0], [0.5, 4.75, 9.0])
