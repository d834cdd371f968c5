"""Device functions of torch.spyre: availability, the current device, lazy init."""

import os
import warnings

import torch

from . import _C, _profiler_exit

# c10::DeviceType::PrivateUse1, the device type torch uses for spyre.
DEVICE_TYPE = _C._device_type
# c10::DeviceIndex is an int8_t; the limit is defined once, in C++.
_MAX_DEVICE_INDEX = _C._max_devices - 1


def _device_index(device, *, optional=True) -> int:
    """The index named by `device` (int, str, torch.device or None); -1 = current
    (None, "spyre", or -1 itself; -2 and below raise, as torch.cuda's functions do)."""
    if device is None:
        if optional:
            return -1
        raise ValueError("expected a spyre device, got None")
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise TypeError(
            f"device must be an int, str, torch.device or None, got {device!r} "
            f"of type {type(device).__name__}"
        )
    if isinstance(device, int):
        if device < -1 or device > _MAX_DEVICE_INDEX:
            # raises C++'s one message: -1 is the current device (as on CUDA), -2 and
            # below are a ValueError, past the visible devices a RuntimeError
            _C._check_device_index(device)
        return device
    if isinstance(device, str):
        text = device
        try:
            device = torch.device(text)
        except RuntimeError as e:
            raise ValueError(f"Invalid device string {text!r}: {e}") from None
        if device.type != "spyre":
            raise ValueError(f"expected a spyre device, got {text!r}")
        # torch.device narrows the index to int8 unchecked: 'spyre:300' is spyre:44.
        digits = text.rpartition(":")[2]
        if digits.isdigit() and int(digits) != device.index:
            _C._check_device_index(int(digits))
    if device.type != "spyre":
        raise ValueError(f"expected a spyre device, got {str(device)!r}")
    if device.index is None:
        return -1
    if device.index > _MAX_DEVICE_INDEX:
        _C._check_device_index(device.index)
    return device.index


def is_available() -> bool:
    """True if at least one Spyre device is visible to this process."""
    try:
        return _C.device_count() > 0
    except RuntimeError:
        return False


def device_count() -> int:
    """Number of Spyre devices visible to this process (does not start the runtime)."""
    return _C.device_count()


def current_device() -> int:
    """The calling thread's current device (LOCAL_RANK or 0 until set)."""
    return _C.current_device()


def set_device(device) -> None:
    """Set the calling thread's current device; the index is checked at once."""
    if isinstance(device, int) and not isinstance(device, bool) and device < 0:
        # upstream torch-spyre's tests require this to raise (torch.cuda ignores it)
        raise ValueError(
            f"Invalid device index {device}: set_device needs an index in [0, {device_count()})"
        )
    index = _device_index(device, optional=False)
    _C.set_device(index)


def is_initialized() -> bool:
    """True once the runtime of this process has started."""
    return _C._is_initialized()


def _is_in_bad_fork() -> bool:
    return _C._is_in_bad_fork()


def _lazy_init() -> None:
    """Start the runtime if it is not running (thread safe; runs once per process).

    torch calls this before the first spyre tensor is created. In a process
    forked from one that started the runtime it raises.
    """
    if not _C._is_initialized():
        _C.start_runtime()


def init() -> None:
    """Start the runtime now instead of at first device use."""
    _lazy_init()


def synchronize(device=None) -> None:
    """Wait for all work on every stream of the device (default: the current one)."""
    if torch.compiler.is_compiling():  # what dynamo traces (docs/compile.md)
        if device is None:
            torch.accelerator.synchronize()  # dynamo's handler refuses an explicit None
        else:
            torch.accelerator.synchronize(device)
        return
    if _profiler_exit.stopping():  # torch's profiler stopping (_profiler_exit.py)
        _drain_for_profiler(_device_index(device))
        return
    _C._synchronize(_device_index(device))


def _drain_for_profiler(device_index) -> None:
    """Wait for the device without raising, so the profile completes; a fault is
    reported by a warning, and one not seen yet stays pending for the program's
    next synchronize (docs/profiling.md, "Faults")."""
    failed, consumed = _C._synchronize_no_throw(device_index)
    if consumed:
        message = f"spyre: a stream failed while the profiler stopped: {consumed}"
    elif failed:
        message = (
            "spyre: a stream is in the error state at the end of the profile (it failed during "
            "or before it); the profile is complete, and a failure not reported yet is raised "
            "by the next synchronize() or query() of its stream"
        )
    else:
        return
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]


def _resolved_index(device) -> int:
    """The index named by `device`, with None/"spyre" resolved to the current device."""
    index = _device_index(device)
    return current_device() if index < 0 else index


class device:
    """Context manager that makes `device` the current spyre device (torch.cuda.device).

    None (or a negative int, as on CUDA) leaves the current device unchanged.
    Setting the device does not start the runtime.
    """

    def __init__(self, device):
        self.idx = -1 if isinstance(device, int) and device < 0 else _device_index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C.current_device()
            _C.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev_idx >= 0:
            _C.set_device(self.prev_idx)
            self.prev_idx = -1
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor or storage) current.

    A no-op for objects that are not on spyre.
    """

    def __init__(self, obj):
        super().__init__(obj.get_device() if obj.device.type == "spyre" else -1)


class _SpyreDeviceProperties:
    """What get_device_properties reports (read-only)."""

    __slots__ = ("name", "card_index", "total_memory", "engines", "dma_engines")

    def __init__(self, name, card_index, total_memory, engines, dma_engines):
        values = (name, card_index, total_memory, engines, dma_engines)
        for key, value in zip(self.__slots__, values):
            object.__setattr__(self, key, value)

    def __setattr__(self, key, value):
        raise AttributeError(f"'{type(self).__name__}' object attribute '{key}' is read-only")

    def __repr__(self):
        engines = "unlimited" if self.engines is None else self.engines
        return (
            f"_SpyreDeviceProperties(name='{self.name}', card_index={self.card_index}, "
            f"total_memory={self.total_memory >> 20}MB, engines={engines}, "
            f"dma_engines={self.dma_engines})"
        )


def get_device_properties(device=None) -> _SpyreDeviceProperties:
    """Name, card index, total memory (bytes), execution engines (None: unlimited)
    and DMA engines of the device. Starts the runtime, as torch.cuda's does."""
    props = _C._device_properties(_device_index(device))
    return _SpyreDeviceProperties(
        props["name"],
        props["card_index"],
        props["total_memory"],
        props["engines"] or None,  # the runtime reports 0 for unlimited
        props["dma_engines"],
    )


def get_device_name(device=None) -> str:
    return get_device_properties(device).name


def get_device_capability(device=None) -> dict:
    """torch.accelerator.get_device_capability: {"supported_dtypes": {...}}, as on XPU."""
    return torch.accelerator.get_device_capability(_resolved_index(device))


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 tensors, copies and autocast work on spyre."""
    return True


def _downcast_warning_from_env() -> bool:
    value = os.environ.get("TORCH_SPYRE_DOWNCAST_WARN", "")
    return value.strip().lower() not in ("0", "false", "off")


# Upstream torch-spyre warns when the card narrows int64 to int32. The
# emulation narrows only under the card's rules (TORCH_SPYRE_CARD_RULES=1,
# docs/tensors.md "Running like a card"); the setting lives in C++, where the
# copy warns. TORCH_SPYRE_DOWNCAST_WARN=0/false/off disables it at import.
_C._set_downcast_warning(_downcast_warning_from_env())


def get_downcast_warning() -> bool:
    """Whether the int64 downcast warning is enabled (upstream's API; the emulation
    downcasts only under the card's rules, TORCH_SPYRE_CARD_RULES=1)."""
    return _C._get_downcast_warning()


def set_downcast_warning(enabled: bool) -> None:
    """Enable or disable the int64 downcast warning for this process."""
    if type(enabled) is not bool:
        raise TypeError(
            f"set_downcast_warning expects a bool, got {enabled!r} of type {type(enabled).__name__}"
        )
    _C._set_downcast_warning(enabled)


def card_rules() -> bool:
    """True when the device follows a Spyre card's data-type rules
    (TORCH_SPYRE_CARD_RULES=1: the card's dtypes, int64 stored as int32, 128-byte
    allocation sticks). Raises ValueError for a value of the variable other than 0 or 1."""
    return _C._card_rules()


def numerics() -> str:
    """What float16 and bfloat16 values in device memory are (TORCH_SPYRE_NUMERICS):
    ``"ieee"`` (torch's formats, values equal to CPU's), ``"dl16:nnp1"`` or
    ``"dl16:card-2026-06"`` (DLFloat16 under that rounding profile: every value written is
    rounded, as on a card; docs/tensors.md, "DLFloat16"). Raises ValueError for an unknown
    value of the variable."""
    return _C._numerics()


def numerics_report(reset: bool = False) -> dict:
    """Under DLFloat16 numerics, how many finite float16 or bfloat16 values each op turned
    into NaN or infinity by rounding to DLFloat16 (beyond the card's range), by op name
    (``"aten::mul.out"``, ``"aten::copy_"``, ``"aten::fill_"``, a compiled kernel's name,
    ``"spyreccl:allreduce"``), since the process started or the last ``reset=True``. Counts
    work that has run: synchronize first. Empty with the switch off."""
    if type(reset) is not bool:
        raise TypeError(f"numerics_report: reset must be a bool, got {reset!r}")
    report = _C._numerics_report()
    if reset:
        _C._reset_numerics_report()
    return report
