"""Printing a spyre tensor (repr, str, print, f-strings): torch's formatter runs on one copy of
the tensor on the host (torch_spyre/_patches/host_copy_printing.py), so the text is CPU's
with spyre's device suffix, the device never computes for it and a card's rules hold
(test/card_rules_suite.py prints every card dtype with TORCH_SPYRE_CARD_RULES=1)."""

import pytest
import torch
from torch_spyre.testing import launched_ops

from _printing import wide_lines, with_device
from torch_spyre import _patches


def test_a_spyre_tensor_prints_as_cpu_prints_it_with_its_device():
    assert repr(torch.ones(2, device="spyre")) == "tensor([1., 1.], device='spyre:0')"
    assert str(torch.tensor([1, 2], device="spyre")) == "tensor([1, 2], device='spyre:0')"
    assert repr(torch.tensor(2.5, device="spyre")) == "tensor(2.5000, device='spyre:0')"
    assert repr(torch.tensor([1.5, float("nan"), float("inf")], device="spyre")) == (
        "tensor([1.5000,    nan,    inf], device='spyre:0')")
    assert repr(torch.empty(0, 3, device="spyre")) == "tensor([], device='spyre:0', size=(0, 3))"
    assert repr(torch.ones(2, 2, device="spyre", requires_grad=True) * 2) == (
        "tensor([[2., 2.],\n        [2., 2.]], device='spyre:0', grad_fn=<MulBackward0>)")
    assert repr(torch.nn.Parameter(torch.ones(2, device="spyre"))) == (
        "Parameter containing:\ntensor([1., 1.], device='spyre:0', requires_grad=True)")
    assert f"{torch.tensor(2.5, device='spyre'):.3f}" == "2.500"


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32,
                                   torch.int64, torch.float16, torch.bfloat16, torch.float32,
                                   torch.float64, torch.complex64, torch.float8_e4m3fn],
                         ids=str)
def test_every_dtype_prints_cpus_text(dtype):
    for values in ([0, 1, 2], [[1.5, -2.25], [1e3, 3e-3]], 7):
        cpu = torch.tensor(values).to(dtype)
        with wide_lines():
            assert repr(cpu.to("spyre")) == with_device(repr(cpu)), (dtype, values)


def test_views_and_summaries_print_their_own_elements():
    base = torch.arange(12.0).reshape(3, 4)
    dev = base.to("spyre")
    with wide_lines():
        for view in (lambda t: t.t(), lambda t: t[:, 1::2], lambda t: t.neg(), lambda t: t[2]):
            assert repr(view(dev)) == with_device(repr(view(base)))
        long = torch.arange(2000.0)
        assert repr(long.to("spyre")) == with_device(repr(long))  # summarized: "..."
    assert repr(long.to("spyre")).startswith("tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ...,")


def test_printing_copies_the_tensor_once_and_computes_nothing_on_the_device():
    x = torch.randn(40, 30, device="spyre")
    torch.spyre.synchronize()
    before = launched_ops()
    repr(x)
    assert launched_ops() == before + 1  # the copy to the host: no masked_select, abs, max, ...


def test_the_printing_replacement_is_checked_and_in_place():
    from torch import _tensor_str

    assert _patches.report()[_patches.PRINTING] == "enabled"
    assert _tensor_str._tensor_str._torch_spyre_wraps is not None
    assert _patches.print_from_host_copy() is True  # a second call wraps nothing again
    assert not hasattr(_tensor_str._tensor_str._torch_spyre_wraps, "_torch_spyre_wraps")
