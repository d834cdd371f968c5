"""spyre's random number generator, as PyTorch's reference-backend tests check it: one default
generator object, every op that draws without a generator draws from it, and its draws from a
seed equal CPU's."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_spyre

C = torch_spyre._C


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
