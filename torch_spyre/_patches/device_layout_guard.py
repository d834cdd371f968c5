"""Feature LAYOUT_GUARD: torch.compile's guard on spyre tensors' device layouts (the guard's
condition: torch_spyre/_device_layouts.py)."""

import functools

import torch

from .ledger import LAYOUT_GUARD, check


def guard_device_layouts(guards):
    """Why: dynamo's TENSOR_MATCH guards sizes, strides, dtype and device, not the device
    layout, so a compiled graph traced for one layout would be reused for another. Changes:
    GuardBuilder.TENSOR_MATCH also installs, for a spyre tensor, a guard that its layout is the
    one seen at tracing (_device_layouts.guard_condition); the wrapper keeps TENSOR_MATCH's
    name and guard_check_spec. Retired by: a device hook for extra tensor guards in dynamo."""
    if not check(LAYOUT_GUARD):
        return
    from .. import _device_layouts

    builder = guards.GuardBuilder
    original = builder.TENSOR_MATCH
    if getattr(original, "_torch_spyre_wraps", None) is not None:
        return

    @functools.wraps(original)
    def TENSOR_MATCH(self, guard, value=None):
        original(self, guard, value)
        if guards.match_on_id_for_tensor(guard):
            return  # an ID_MATCH: the same tensor object
        tensor = value() if isinstance(value, torch.utils.weak.TensorWeakRef) else value
        tensor = tensor if tensor is not None else self.get(guard)
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "spyre":
            return
        self.get_guard_manager(guard).add_lambda_guard(
            _device_layouts.guard_condition(tensor),
            [f"device_tensor_layout({guard.name}) is the traced input's"], guard.user_stack)

    TENSOR_MATCH._torch_spyre_wraps = original
    builder.TENSOR_MATCH = TENSOR_MATCH
