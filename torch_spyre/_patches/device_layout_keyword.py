"""Feature LAYOUTS: upstream torch-spyre's device_layout= keyword on Tensor.to and
torch.empty/zeros/ones/full (the layouts themselves: torch_spyre/_device_layouts.py)."""

import functools

import torch

from .ledger import LAYOUTS, check

_LAYOUT_FACTORIES = ("empty", "zeros", "ones", "full")


def _with_device_layout(original, apply):
    """`original` taking one more keyword, device_layout=: without it (or with None) the call
    is original's; with it, apply(args, kwargs, layout)."""

    @functools.wraps(original)
    def call(*args, device_layout=None, **kwargs):
        if device_layout is None:
            return original(*args, **kwargs)
        return apply(args, kwargs, device_layout)

    call._torch_spyre_wraps = original
    return call


def wrap_device_layouts():
    """Why: upstream torch-spyre's API passes device_layout= to Tensor.to and to the factories,
    keywords torch's argument parsers refuse. Changes: torch.Tensor.to, torch.empty,
    torch.zeros, torch.ones, torch.full accept device_layout=; without it the call goes to
    torch's function unchanged. Retired by: a device-specific keyword in torch's factories (none
    is planned), or upstream moving its API off torch's names."""
    if not check(LAYOUTS):
        return
    from .. import _device_layouts

    if "to" not in torch.Tensor.__dict__:
        torch.Tensor.to = _with_device_layout(
            torch._C.TensorBase.to,
            lambda args, kwargs, layout: _device_layouts.to_with_layout(
                args[0], layout, args[1:], kwargs))
    for name in _LAYOUT_FACTORIES:
        if getattr(getattr(torch, name), "_torch_spyre_wraps", None) is None:
            wrapper = _with_device_layout(getattr(torch, name),
                                          functools.partial(_factory_with_layout, name))
            setattr(torch, name, wrapper)
            # TorchScript compiles torch.<name> as its aten op: its table of them, built at
            # its first use from torch's attributes, finds the wrapper there; one built
            # already is told.
            if torch.jit._builtins._builtin_table is not None:
                torch.jit._builtins._register_builtin(wrapper, "aten::" + name)


def _factory_with_layout(name, args, kwargs, layout):
    from .. import _device_layouts

    return _device_layouts.factory_with_layout(name, args, kwargs, layout)
