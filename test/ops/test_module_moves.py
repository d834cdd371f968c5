"""Module.to and `.data` swaps between cpu and spyre, as PyTorch's reference-backend tests check
them: the parameters themselves move (csrc/aten/shallow_copy.cpp), so an optimizer built before
Module.to trains the moved ones."""

import copy

import torch
from torch import nn


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
