"""Quantized tensors on spyre (csrc/aten/quantized.cpp): refused at the call with a message
that says to quantize on the CPU; dequantize() of a spyre tensor is a float copy."""

import pytest
import torch

QUANTIZED = {torch.quint8, torch.qint8, torch.qint32, torch.quint4x2, torch.quint2x4}


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
