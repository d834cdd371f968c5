"""Issue 31, items 12, 15 and 16: what PyTorch's reference-backend tests check
for Module.to and `.data` swaps, generator state, and quantized tensors."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_spyre

C = torch_spyre._C
QUANTIZED = {torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4}

# ---------------------------------------------------------------- item 12


def test_module_to_spyre_moves_the_parameters_themselves():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    model.weight.grad = torch.full((3, 4), 0.25)
    params, grad = list(model.parameters()), model.weight.grad
    assert model.to("spyre") is model
    assert [p is q for p, q in zip(model.parameters(), params)] == [True, True]
    assert model.weight.grad is grad
    assert [p.device for p in params] == [torch.device("spyre:0")] * 2
    assert grad.device == torch.device("spyre:0") and grad.cpu().tolist() == [[0.25] * 4] * 3
    model.to("cpu")
    assert [p is q for p, q in zip(model.parameters(), params)] == [True, True]
    assert [p.device.type for p in params] == ["cpu", "cpu"]


def test_an_optimizer_built_before_module_to_trains_the_moved_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    reference = copy.deepcopy(model)
    initial = model[0].weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.5, momentum=0.9)
    model.to("spyre")
    x = torch.linspace(-1, 1, 12).reshape(3, 4)
    for _ in range(3):
        optimizer.zero_grad()
        model(x.to("spyre")).square().sum().backward()
        optimizer.step()
        reference_optimizer.zero_grad()
        reference(x).square().sum().backward()
        reference_optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        assert ours.device.type == "spyre"
        assert torch.equal(ours.cpu(), theirs)
    assert not torch.equal(model[0].weight.cpu(), initial)  # the optimizer moved them


def test_data_swaps_between_cpu_and_spyre():
    p = nn.Parameter(torch.zeros(3))
    p.data = torch.arange(3.0).to("spyre")
    assert p.device == torch.device("spyre:0") and p.requires_grad
    assert p.cpu().tolist() == [0.0, 1.0, 2.0]
    (p * p).sum().backward()
    assert p.grad.device == torch.device("spyre:0") and p.grad.cpu().tolist() == [0.0, 2.0, 4.0]
    p.data = torch.ones(2)
    assert p.device == torch.device("cpu") and p.tolist() == [1.0, 1.0]


def test_shallow_copy_compatibility_answers():
    cpu, spyre = torch.zeros(2), torch.zeros(2, device="spyre")
    check = torch._has_compatible_shallow_copy_type
    assert [check(cpu, spyre), check(spyre, cpu), check(spyre, spyre), check(cpu, cpu)] == [True] * 4
    assert not check(spyre, torch.zeros(2).to_sparse())
    assert not check(spyre, torch.quantize_per_tensor(torch.zeros(2), 0.5, 0, torch.quint8))


# ---------------------------------------------------------------- item 15


def test_the_default_generator_is_one_python_object():
    g = C._get_default_generator()
    assert C._get_default_generator() is g
    assert C._get_default_generator(0) is g
    assert C._get_default_generator(-1) is g
    assert g.device == torch.device("spyre:0")


RANDOM_WITHOUT_GENERATOR = {
    "rand": lambda x: torch.rand(6, device="spyre"),
    "randn_like": lambda x: torch.randn_like(x),
    "randint": lambda x: torch.randint(0, 100, (6,), device="spyre"),
    "randperm": lambda x: torch.randperm(6, device="spyre"),
    "F.dropout": lambda x: F.dropout(x, 0.5),
    "nn.Dropout": lambda x: nn.Dropout(0.3)(x),
    "F.dropout2d": lambda x: F.dropout2d(x.reshape(1, 2, 3), 0.5),
    "F.alpha_dropout": lambda x: F.alpha_dropout(x, 0.5, training=True),
    "F.feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.reshape(1, 2, 3), 0.5, True),
    "bernoulli": lambda x: torch.bernoulli(x / 7),
    "multinomial": lambda x: torch.multinomial(x, 3),
    "F.rrelu": lambda x: F.rrelu(x - 3, training=True),
    "sdpa dropout": lambda x: F.scaled_dot_product_attention(
        x.reshape(1, 2, 3), x.reshape(1, 2, 3), x.reshape(1, 2, 3), dropout_p=0.5),
    "nn.RNN dropout": lambda x: nn.RNN(3, 3, num_layers=2, dropout=0.5).to("spyre")(
        x.reshape(2, 3))[0],
}


@pytest.mark.parametrize("name", sorted(RANDOM_WITHOUT_GENERATOR))
def test_ops_drawing_without_a_generator_use_spyres_generator(name):
    draw = RANDOM_WITHOUT_GENERATOR[name]
    x = torch.arange(1.0, 7.0, device="spyre")
    cpu_state = torch.get_rng_state()

    def run(seed):
        torch.manual_seed(1234)  # modules' own initialization draws from CPU's generator
        cpu_before = torch.get_rng_state()
        torch.spyre.manual_seed(seed)
        result = draw(x)
        drawn_on_cpu = not torch.equal(torch.get_rng_state(), cpu_before)
        return result.cpu(), drawn_on_cpu, torch.spyre.get_rng_state()

    first, second, other = run(7), run(7), run(8)
    assert torch.equal(first[0], second[0]) and torch.equal(first[2], second[2])
    assert not torch.equal(first[2], other[2])  # spyre's generator advanced differently
    if name != "nn.RNN dropout":  # the module's initialization draws on the CPU
        assert first[1] is False
    torch.set_rng_state(cpu_state)


def test_spyre_draws_equal_cpu_draws_from_the_same_seed():
    torch.spyre.manual_seed(11)
    ours = torch.rand(5, device="spyre").cpu()
    theirs = torch.rand(5, generator=torch.Generator().manual_seed(11))
    assert torch.equal(ours, theirs)


# ---------------------------------------------------------------- item 16

REFUSAL = (r"^spyre does not support quantized tensors \({op}\): spyre tensors hold the dtypes in "
           r"torch\.accelerator\.get_device_capability\(\)\['supported_dtypes'\], none of them "
           r"quantized; quantize and dequantize on the CPU$")


def test_quantizing_a_spyre_tensor_fails_at_the_call():
    x = torch.arange(6.0, device="spyre")
    with pytest.raises(TypeError, match=REFUSAL.format(op="aten::quantize_per_tensor")):
        torch.quantize_per_tensor(x, 0.5, 1, torch.quint8)
    with pytest.raises(TypeError, match=REFUSAL.format(op="aten::quantize_per_channel")):
        torch.quantize_per_channel(x.reshape(2, 3), torch.tensor([0.5, 1.0]), torch.tensor([0, 1]),
                                   0, torch.quint8)
    with pytest.raises(TypeError, match=REFUSAL.format(op="aten::quantize_per_tensor_dynamic")):
        torch.quantize_per_tensor_dynamic(x, torch.quint8, False)


def test_a_quantized_cpu_tensor_cannot_move_to_spyre():
    q = torch.quantize_per_tensor(torch.arange(6.0), 0.5, 1, torch.quint8)
    with pytest.raises(TypeError, match=REFUSAL.format(op="aten::empty_quantized")):
        q.to("spyre")
    with pytest.raises(TypeError, match=REFUSAL.format(op="aten::_empty_affine_quantized")):
        torch._empty_affine_quantized([2], scale=0.5, zero_point=1, dtype=torch.quint8,
                                      device="spyre")
    with pytest.raises(TypeError, match=r"^spyre does not support dtype QUInt8"):
        torch.empty(2, dtype=torch.quint8, device="spyre")


def test_dequantize_of_a_spyre_tensor_is_a_float_copy_and_supported_dtypes_stay_unquantized():
    x = torch.arange(6.0, device="spyre")
    assert x.dequantize().cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    q = torch.quantize_per_tensor(torch.arange(6.0), 0.5, 1, torch.quint8)
    assert q.dequantize().to("spyre").cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    supported = torch.accelerator.get_device_capability("spyre")["supported_dtypes"]
    assert supported & QUANTIZED == set()
