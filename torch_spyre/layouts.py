"""Device layouts: upstream torch-spyre's SpyreTensorLayout API (docs/tensors.md, "Device layouts").

A Spyre card stores a tensor in 128-byte *sticks*. A layout says how: `device_size` lists the
device dimensions, outermost first, the last one being the elements of one stick;
`stride_map` gives, for each device dimension, the step in the host tensor's memory (in
elements) that one step along it makes, -1 where the dimension has no host meaning (padding,
a size-1 host dimension, a sparse stick). `device_dtype` is the device format
(`DataFormats`) the elements have on the card.

The default layout of a host tensor of rank n (dimensions in `dim_order`, outermost first)
tiles it as `dim_order[1:] + [dim_order[0], dim_order[-1]]`: every dimension but the first
in order, then the first, then the stick dimension (the last in `dim_order`) a second time
for the elements inside a stick. The stick dimension's first occurrence counts its sticks
(its size rounded up to whole sticks). A `dim_order` with a trailing -1 asks for sparse
sticks: one element per stick.

The tensor side (Tensor.device_tensor_layout, device_layout= on Tensor.to and the factories,
the torch.compile guard) is in _device_layouts.py; the card's allocation sizes are in
csrc/device/card_rules.*.
"""

import enum

import torch

__all__ = ["DataFormats", "SpyreTensorLayout", "get_device_dtype"]

STICK_BYTES = 128


class DataFormats(enum.Enum):
    """The card's data formats, by upstream's names (their numeric values are not upstream's)."""

    SEN169_FP16 = 0  # DLFloat16: 1 sign, 6 exponent, 9 mantissa bits
    IEEE_FP32 = 1
    INVALID = 2
    SEN143_FP8 = 3
    SEN152_FP8 = 4
    SEN153_FP9 = 5
    SENINT2 = 6
    SENINT4 = 7
    SENINT8 = 8
    SENINT16 = 9
    SENINT24 = 10
    IEEE_INT64 = 11
    IEEE_INT32 = 12
    SENUINT32 = 13
    SENUINT2 = 14
    IEEE_FP16 = 15
    BOOL = 16
    BFLOAT16 = 17
    SEN18F_FP24 = 18

    def elems_per_stick(self):
        """How many elements of this format one 128-byte stick holds."""
        bits = _FORMAT_BITS.get(self)
        if bits is None:
            raise ValueError(f"{self} has no known stick size (known: "
                             f"{', '.join(str(f) for f in _FORMAT_BITS)})")
        return STICK_BYTES * 8 // bits


# Bits per element of the formats whose packing is known. SEN153_FP9, SENINT24 and
# SEN18F_FP24 are left out: upstream's table for them is not public.
_FORMAT_BITS = {
    DataFormats.SEN169_FP16: 16,
    DataFormats.IEEE_FP32: 32,
    DataFormats.SEN143_FP8: 8,
    DataFormats.SEN152_FP8: 8,
    DataFormats.SENINT2: 2,
    DataFormats.SENINT4: 4,
    DataFormats.SENINT8: 8,
    DataFormats.SENINT16: 16,
    DataFormats.IEEE_INT64: 64,
    DataFormats.IEEE_INT32: 32,
    DataFormats.SENUINT32: 32,
    DataFormats.SENUINT2: 2,
    DataFormats.IEEE_FP16: 16,
    DataFormats.BOOL: 8,
    DataFormats.BFLOAT16: 16,
}

# The device format of each torch dtype a card holds (upstream's types_mapping.h): float16,
# bfloat16 and bool become DLFloat16, int64 is stored as int32, uint8 as a 32-bit SENUINT32.
# csrc/device/card_rules.cpp (deviceElementBytes) has the same table in bytes.
_DEVICE_FORMATS = {
    torch.float16: DataFormats.SEN169_FP16,
    torch.bfloat16: DataFormats.SEN169_FP16,
    torch.bool: DataFormats.SEN169_FP16,
    torch.float32: DataFormats.IEEE_FP32,
    torch.int8: DataFormats.SENINT8,
    torch.int16: DataFormats.SENINT16,
    torch.int32: DataFormats.IEEE_INT32,
    torch.int64: DataFormats.IEEE_INT32,
    torch.uint8: DataFormats.SENUINT32,
    torch.float8_e4m3fn: DataFormats.SEN143_FP8,
    torch.float8_e5m2fnuz: DataFormats.SEN152_FP8,
}


def get_device_dtype(dtype):
    """The card's format for torch dtype `dtype`; DataFormats.INVALID when a card has none."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"get_device_dtype: expected a torch.dtype, got {dtype!r}")
    return _DEVICE_FORMATS.get(dtype, DataFormats.INVALID)


def _device_format(dtype):
    fmt = get_device_dtype(dtype)
    if fmt is DataFormats.INVALID:
        raise ValueError(f"SpyreTensorLayout: a Spyre card has no device format for {dtype} "
                         f"(it has one for {', '.join(str(d) for d in _DEVICE_FORMATS)})")
    return fmt


def _int_list(name, value):
    try:
        items = list(value)
    except TypeError:
        raise TypeError(f"SpyreTensorLayout: {name} must be a sequence of ints, got "
                        f"{value!r}") from None
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise TypeError(f"SpyreTensorLayout: {name} must be a sequence of ints, got "
                            f"{value!r}")
    return items


def _contiguous_strides(size):
    strides, step = [], 1
    for extent in reversed(size):
        strides.append(step)
        step *= extent
    return strides[::-1]


def _tile(host_size, host_strides, fmt, dim_order):
    """(device_size, stride_map) of the default tiling of a host tensor in `dim_order`."""
    if not host_size:  # a scalar: one stick, no host dimension
        return [1, fmt.elems_per_stick()], [-1, -1]
    sparse = dim_order[-1] == -1
    dim_map = dim_order[1:] + [dim_order[0], dim_order[-1]]
    stick_dim = dim_map[-1]
    per_stick = fmt.elems_per_stick()
    device_size = []
    for dim in dim_map[:-1]:
        if dim != stick_dim:
            device_size.append(host_size[dim])
        elif sparse:
            device_size.append(1)
        else:
            device_size.append(-(-host_size[stick_dim] // per_stick))
    device_size.append(per_stick)
    # From the innermost device dimension out, each occurrence of a host dimension steps
    # by the span of its occurrences further in.
    stride_map = [-1] * len(dim_map)
    span = {}
    for j in range(len(dim_map) - 1, -1, -1):
        dim = dim_map[j]
        if dim == -1 or host_size[dim] == 1:
            continue
        stride_map[j] = span.get(dim, host_strides[dim])
        span[dim] = stride_map[j] * device_size[j]
    return device_size, stride_map


def _check_dim_order(host_size, dim_order):
    rank = len(host_size)
    sparse = len(dim_order) == rank + 1 and rank > 0 and dim_order[-1] == -1
    dims = dim_order[:-1] if sparse else dim_order
    if sorted(dims) != list(range(rank)):
        raise ValueError(
            f"SpyreTensorLayout: dim_order {dim_order} does not fit host_size {host_size}: "
            f"expected a permutation of 0..{rank - 1}, optionally followed by -1 (sparse sticks)")


class SpyreTensorLayout:
    """How a tensor is laid out in a Spyre card's memory (upstream torch-spyre's class).

    SpyreTensorLayout(host_size, dtype): the default layout of a contiguous tensor.
    SpyreTensorLayout(host_size, host_strides, dtype, dim_order): the default tiling of a
        tensor with those strides, its dimensions taken in `dim_order` (outermost first; a
        trailing -1 asks for sparse sticks).
    SpyreTensorLayout(device_size, stride_map, device_dtype): a layout given in full (for
        compilers and experts: upstream checks nothing; here the lengths, the formats and the
        stick must agree).
    """

    __slots__ = ("_device_size", "_stride_map", "_device_dtype")

    def __init__(self, *args, **kwargs):
        if len(args) + len(kwargs) == 2:
            names = ("host_size", "dtype")
        elif len(args) + len(kwargs) == 4:
            names = ("host_size", "host_strides", "dtype", "dim_order")
        elif len(args) + len(kwargs) == 3:
            names = ("device_size", "stride_map", "device_dtype")
        else:
            raise TypeError(
                "SpyreTensorLayout() takes (host_size, dtype), (host_size, host_strides, dtype, "
                f"dim_order) or (device_size, stride_map, device_dtype); got {len(args)} "
                f"positional and {sorted(kwargs)} keyword arguments")
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names or key in bound:
                raise TypeError(f"SpyreTensorLayout() got an unexpected keyword argument "
                                f"{key!r} for the form ({', '.join(names)})")
            bound[key] = value
        if len(names) == 3:
            self._set_explicit(**bound)
            return
        host_size = _int_list("host_size", bound["host_size"])
        if any(extent < 0 for extent in host_size):
            raise ValueError(f"SpyreTensorLayout: host_size {host_size} has a negative size")
        if not isinstance(bound["dtype"], torch.dtype):
            raise TypeError(f"SpyreTensorLayout: dtype must be a torch.dtype, got "
                            f"{bound['dtype']!r}")
        fmt = _device_format(bound["dtype"])
        if len(names) == 2:
            host_strides = _contiguous_strides(host_size)
            dim_order = list(range(len(host_size)))
        else:
            host_strides = _int_list("host_strides", bound["host_strides"])
            if len(host_strides) != len(host_size):
                raise ValueError(f"SpyreTensorLayout: host_strides {host_strides} and host_size "
                                 f"{host_size} differ in length")
            dim_order = _int_list("dim_order", bound["dim_order"])
            _check_dim_order(host_size, dim_order)
        device_size, stride_map = _tile(host_size, host_strides, fmt, dim_order)
        self._device_size = tuple(device_size)
        self._stride_map = tuple(stride_map)
        self._device_dtype = fmt

    def _set_explicit(self, device_size, stride_map, device_dtype):
        device_size = _int_list("device_size", device_size)
        stride_map = _int_list("stride_map", stride_map)
        if not isinstance(device_dtype, DataFormats):
            raise TypeError(f"SpyreTensorLayout: device_dtype must be a DataFormats (e.g. "
                            f"get_device_dtype(torch.float16)), got {device_dtype!r}")
        if not device_size or len(device_size) != len(stride_map):
            raise ValueError(f"SpyreTensorLayout: device_size {device_size} and stride_map "
                             f"{stride_map} must have the same, nonzero length")
        if any(extent < 0 for extent in device_size):
            raise ValueError(f"SpyreTensorLayout: device_size {device_size} has a negative size")
        if any(step < -1 for step in stride_map):
            raise ValueError(f"SpyreTensorLayout: stride_map {stride_map} has a step below -1 "
                             f"(-1 marks a dimension with no host meaning)")
        if device_size[-1] != device_dtype.elems_per_stick():
            raise ValueError(
                f"SpyreTensorLayout: the last device dimension is the stick: device_size "
                f"{device_size} must end with {device_dtype.elems_per_stick()} "
                f"({device_dtype} elements per 128-byte stick)")
        self._device_size = tuple(device_size)
        self._stride_map = tuple(stride_map)
        self._device_dtype = device_dtype

    @property
    def device_size(self):
        return list(self._device_size)

    @property
    def stride_map(self):
        return list(self._stride_map)

    @property
    def device_dtype(self):
        return self._device_dtype

    def elems_per_stick(self):
        return self._device_dtype.elems_per_stick()

    def device_bytes(self):
        """The device memory the layout takes: one 128-byte stick per index of the outer
        device dimensions (upstream's get_device_size_in_bytes)."""
        sticks = 1
        for extent in self._device_size[:-1]:
            sticks *= extent
        return sticks * STICK_BYTES

    def host_offsets(self):
        """The host element offsets the layout's positions hold (a CPU int64 tensor, one entry
        per device position; a dimension with no host meaning contributes its index 0 only)."""
        offsets = torch.zeros((), dtype=torch.int64)
        for extent, step in zip(self._device_size, self._stride_map):
            if step == -1:
                extent, step = min(extent, 1), 0
            offsets = offsets.unsqueeze(-1) + torch.arange(extent, dtype=torch.int64) * step
        return offsets.reshape(-1)

    def __eq__(self, other):
        if not isinstance(other, SpyreTensorLayout):
            return NotImplemented
        return (self._device_size == other._device_size
                and self._stride_map == other._stride_map
                and self._device_dtype is other._device_dtype)

    def __hash__(self):
        return hash((self._device_size, self._stride_map, self._device_dtype.name))

    def __reduce__(self):
        return (SpyreTensorLayout, (list(self._device_size), list(self._stride_map),
                                    self._device_dtype))

    def __str__(self):
        # Upstream's format, its space before "=[" included.
        return (f"SpyreTensorLayout(device_size={list(self._device_size)}, stride_map "
                f"={list(self._stride_map)}, device_dtype={self._device_dtype})")

    __repr__ = __str__
