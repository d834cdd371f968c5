"""Feature HOST_READS: the stream sanitizer's checks of Tensor.numpy() and Tensor.tolist()
(torch_spyre/sanitizer.py turns them on and off)."""

import torch

from .ledger import HOST_READS, check

_HOST_READS = ("numpy", "tolist")


def _host_read(name):
    """Tensor.<name> reporting a read of a pending copy's host bytes."""
    from .. import _C

    original = getattr(torch._C.TensorBase, name)

    def read(self, *args, **kwargs):
        if _C._sanitizer_host_pending() and self.device.type == "cpu":
            _C._sanitizer_host_read(self, f"{name}()")
        return original(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = original.__doc__
    read._spyre_sanitizer = True
    return read


def wrap_host_reads():
    """Why: Tensor.numpy() and tolist() read a CPU tensor's memory without the dispatcher, so
    the sanitizer's CPU-side check (csrc/launch/sanitizer_host.cpp) never sees them.
    Changes: torch.Tensor.numpy / tolist, while the sanitizer is on (removed by
    unwrap_host_reads); each calls TensorBase's after the check.
    Retired by: a dispatcher op (or a hook) for the host reads numpy() and tolist() make."""
    if not check(HOST_READS):
        return
    for name in _HOST_READS:
        if name not in torch.Tensor.__dict__:  # not wrapped yet, nor overridden by someone else
            setattr(torch.Tensor, name, _host_read(name))


def unwrap_host_reads():
    for name in _HOST_READS:
        if getattr(torch.Tensor.__dict__.get(name), "_spyre_sanitizer", False):
            delattr(torch.Tensor, name)
