"""Device layouts of spyre tensors (docs/tensors.md, "Device layouts"): which layout a tensor has,
device_layout= on Tensor.to and the factories, and the torch.compile guard on layouts. The
layout class and its rules are in layouts.py; _patches/ installs the wrappers below.

A layout asked for with device_layout= is recorded on the tensor's storage, so views and
detached aliases share it, until the storage is resized; a tensor without one has the default
layout of its base (the tensor a view was taken of, or itself). Elements stay in PyTorch's strided order inside the
allocation, so kernels compute CPU's values; the layout decides the allocation's size under the
card's rules (csrc/device/card_rules.*).
"""

import functools
import sys

import torch

from .layouts import SpyreTensorLayout, get_device_dtype

_RECORD = "_spyre_device_layout"  # the attribute of the storage's Python object


def _recorded(storage):
    """The layout recorded on `storage`, or None. A record holds the storage's size: a storage
    that was resized since (resize_ of its tensor) no longer has that layout."""
    record = getattr(storage, _RECORD, None)
    if record is None or record[1] != storage.nbytes():
        return None
    return record[0]


@functools.lru_cache(maxsize=4096)
def _default_layout(size, strides, dtype):
    return SpyreTensorLayout(list(size), list(strides), dtype, list(range(len(size))))


def device_tensor_layout(tensor):
    """The device layout of a spyre tensor (None for any other device and for fake tensors)."""
    if tensor.device.type != "spyre":
        return None
    fake = sys.modules.get("torch._subclasses.fake_tensor")  # loaded before any fake tensor
    if fake is not None and isinstance(tensor, fake.FakeTensor):
        return None  # compiled code traces with fake tensors: they have no memory
    recorded = _recorded(tensor.untyped_storage())
    if recorded is not None:
        return recorded
    base = tensor._base if tensor._base is not None else tensor
    return _default_layout(tuple(base.shape), tuple(base.stride()), base.dtype)


def _check_layout(layout, size, strides, dtype):
    """Raises unless `layout` is a layout of `dtype` that holds every element of a dense tensor
    of `size` and `strides`."""
    if not isinstance(layout, SpyreTensorLayout):
        raise TypeError(f"device_layout must be a torch.spyre.SpyreTensorLayout, got {layout!r}")
    expected = get_device_dtype(dtype)
    if layout.device_dtype is not expected:
        raise ValueError(f"device_layout {layout} does not fit a tensor of dtype {dtype}: its "
                         f"device_dtype must be {expected}")
    numel = 1
    for extent in size:
        numel *= extent
    if numel == 0:
        return
    offsets = layout.host_offsets()
    held = torch.zeros(numel, dtype=torch.bool)
    held[offsets[offsets < numel]] = True
    if not bool(held.all()):
        missing = int(torch.nonzero(~held)[0])
        raise ValueError(f"device_layout {layout} does not hold every element of a tensor of "
                         f"size {list(size)} and strides {list(strides)}: host offset {missing} "
                         f"has no place in it")


def _spyre_device(device):
    target = torch.device("spyre") if device is None else torch.device(device)
    if target.type != "spyre":
        raise ValueError(f"device_layout= describes spyre device memory; got device {target}")
    return target


def _storage_bytes(size, strides, dtype):
    if any(extent == 0 for extent in size):
        return 0
    span = 1 + sum((extent - 1) * step for extent, step in zip(size, strides))
    return span * dtype.itemsize


def _empty_with_layout(size, strides, dtype, layout, device):
    """An uninitialised spyre tensor recorded with `layout`; under the card's rules its
    allocation is the layout's bytes (whole sticks) when they exceed the strided bytes."""
    from . import card_rules

    nbytes = _storage_bytes(size, strides, dtype)
    if card_rules():
        nbytes = max(nbytes, layout.device_bytes())
    raw = torch.empty(nbytes, dtype=torch.int8, device=device)  # int8: one byte a unit
    tensor = torch.empty(0, dtype=dtype, device=device)
    tensor.set_(raw.untyped_storage(), 0, list(size), list(strides))
    storage = tensor.untyped_storage()
    setattr(storage, _RECORD, (layout, storage.nbytes()))
    return tensor


def _contiguous_strides(size):
    strides, step = [], 1
    for extent in reversed(size):
        strides.append(step)
        step *= max(extent, 1)
    return strides[::-1]


def _parse_to(args, kwargs):
    """Tensor.to's arguments: (device, dtype, non_blocking, copy, memory_format)."""
    rest = list(args)
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        device, dtype = other.device, other.dtype
    else:
        if rest and isinstance(rest[0], (str, torch.device)):
            device = rest.pop(0)
        if rest and isinstance(rest[0], torch.dtype):
            dtype = rest.pop(0)
    if len(rest) > 2:
        raise TypeError(f"to() received too many positional arguments: {args!r}")
    flags = dict(zip(("non_blocking", "copy"), rest))
    non_blocking = kwargs.pop("non_blocking", flags.get("non_blocking", False))
    copy = kwargs.pop("copy", flags.get("copy", False))
    memory_format = kwargs.pop("memory_format", torch.preserve_format)
    if kwargs:
        raise TypeError(f"to() got an unexpected keyword argument {next(iter(kwargs))!r}")
    return device, dtype, non_blocking, copy, memory_format


def to_with_layout(tensor, layout, args, kwargs):
    """tensor.to(..., device_layout=layout): a spyre tensor with that layout (a copy, or
    `tensor` itself when it already is one and no copy was asked for)."""
    device, dtype, non_blocking, copy, memory_format = _parse_to(args, dict(kwargs))
    if device is None:
        device = tensor.device if tensor.device.type == "spyre" else "spyre"
    target = _spyre_device(device)
    if target.index is None:
        target = torch.device("spyre", torch.spyre.current_device())
    dtype = tensor.dtype if dtype is None else dtype
    if memory_format is torch.preserve_format:
        strides = torch.empty_like(tensor, device="meta").stride()
    elif memory_format is torch.contiguous_format:
        strides = _contiguous_strides(tensor.shape)
    else:
        raise ValueError(f"device_layout= takes memory_format torch.preserve_format or "
                         f"torch.contiguous_format, got {memory_format}")
    _check_layout(layout, tensor.shape, strides, dtype)
    if (not copy and tensor.device == target and tensor.dtype == dtype
            and tuple(tensor.stride()) == tuple(strides)
            and device_tensor_layout(tensor) == layout):
        return tensor
    result = _empty_with_layout(tensor.shape, strides, dtype, layout, target)
    result.copy_(tensor, non_blocking=non_blocking)
    return result


_FACTORY_KEYWORDS = ("dtype", "device", "requires_grad", "layout", "pin_memory", "memory_format")


def factory_with_layout(name, args, kwargs, layout):
    """torch.<name>(..., device_layout=layout) for empty, zeros, ones and full: a new
    contiguous spyre tensor (on the current spyre device unless `device` names one)."""
    kwargs = dict(kwargs)
    fill_value = None
    if name == "full":
        if "fill_value" in kwargs:
            fill_value = kwargs.pop("fill_value")
        elif len(args) == 2:
            args, fill_value = args[:1], args[1]
        else:
            raise TypeError(f"full() with device_layout= takes (size, fill_value), got {args!r}")
    if "size" in kwargs:
        if args:
            raise TypeError(f"{name}() got size both as an argument and as size=")
        args = (kwargs.pop("size"),)
    if len(args) == 1 and not isinstance(args[0], int):
        size = list(args[0])
    else:
        size = list(args)
    if "out" in kwargs:
        raise TypeError(f"{name}(): device_layout= makes a new tensor; it cannot be combined "
                        f"with out=")
    unexpected = [key for key in kwargs if key not in _FACTORY_KEYWORDS]
    if unexpected:
        raise TypeError(f"{name}() got an unexpected keyword argument {unexpected[0]!r}")
    if kwargs.get("layout", torch.strided) is not torch.strided:
        raise ValueError(f"{name}(): device_layout= makes strided tensors, got layout "
                         f"{kwargs['layout']}")
    if kwargs.get("pin_memory", False):
        raise ValueError(f"{name}(): pin_memory=True is only valid for CPU tensors, not "
                         f"spyre tensors")
    memory_format = kwargs.get("memory_format", torch.contiguous_format)
    if memory_format not in (torch.contiguous_format, torch.preserve_format):
        raise ValueError(f"{name}(): device_layout= makes contiguous tensors, got "
                         f"memory_format {memory_format}")
    dtype = kwargs.get("dtype")
    if dtype is None:
        dtype = (torch.full((), fill_value, device="meta").dtype if name == "full"
                 else torch.get_default_dtype())
    target = _spyre_device(kwargs.get("device"))
    strides = _contiguous_strides(size)
    _check_layout(layout, size, strides, dtype)
    tensor = _empty_with_layout(size, strides, dtype, layout, target)
    if name == "zeros":
        tensor.zero_()
    elif name == "ones":
        tensor.fill_(1)
    elif name == "full":
        tensor.fill_(fill_value)
    if kwargs.get("requires_grad", False):
        tensor.requires_grad_(True)
    return tensor


def guard_condition(traced):
    """The compile guard's check for a spyre input traced as `traced`: true when an input's layout
    was asked for in the same way. Layouts asked for with device_layout= match when equal; default
    layouts match each other, as they are a function of what dynamo already guards (sizes and
    strides, or, with dynamic shapes, what may vary)."""
    expected = _recorded(traced.untyped_storage())

    def same_layout(tensor):
        if not isinstance(tensor, torch.Tensor):
            return True  # TENSOR_MATCH, on the same input, refuses it (and another device)
        return _recorded(tensor.untyped_storage()) == expected

    return same_layout
