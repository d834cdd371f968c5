"""Feature PRINTING: repr, str and print of a spyre tensor format one copy on the host
(installed at import torch)."""

import functools

from .ledger import PRINTING, check


def print_from_host_copy():
    """torch._tensor_str._tensor_str, formatting a spyre tensor's copy on the host.

    Why: torch's formatter computes on the tensor's device: masked_select, abs, min, max, one
    ceil and one .item() per element (each a wait for the stream), and a cast to float64
    (tensor_totype) that a card cannot hold: under TORCH_SPYRE_CARD_RULES=1 that cast raises
    "spyre cannot allocate a tensor of dtype torch.float64". torch itself formats xla, lazy,
    ipu and mtia tensors from a CPU copy (_str_intern's device list). Changes: a spyre
    tensor's contents are formatted from one copy to the host, with CPU's formatter (spyre's
    values are CPU's, so the text is what the device would print); the device, dtype and
    grad_fn suffixes are still taken from the spyre tensor (_str_intern). Retired by: a
    device-module hook (or a device list torch lets a backend join) for formatting from a
    CPU copy.
    Returns whether the replacement is in place (False, with one warning, on another torch)."""
    from torch import _tensor_str

    if getattr(_tensor_str._tensor_str, "_torch_spyre_wraps", None) is not None:
        return True
    if not check(PRINTING):
        return False
    original = _tensor_str._tensor_str

    @functools.wraps(original)
    def _tensor_str_from_host(self, indent):
        if self.device.type == "spyre":
            self = self.to("cpu")
        return original(self, indent)

    _tensor_str_from_host._torch_spyre_wraps = original
    _tensor_str._tensor_str = _tensor_str_from_host
    return True
