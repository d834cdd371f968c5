"""Device functions of torch.spyre: availability, the current device, lazy init."""

import torch

from . import _C

# c10::DeviceType::PrivateUse1, the device type torch uses for spyre.
DEVICE_TYPE = _C._device_type
# c10::DeviceIndex is an int8_t; the limit is defined once, in C++.
_MAX_DEVICE_INDEX = _C._max_devices - 1


def _device_index(device, *, optional=True) -> int:
    """The index named by `device` (int, str, torch.device or None); -1 = current."""
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
        if not 0 <= device <= _MAX_DEVICE_INDEX:
            raise ValueError(
                f"Invalid device index {device}: expected an index in [0, {_MAX_DEVICE_INDEX}]"
            )
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
            raise ValueError(
                f"Invalid device index {int(digits)} in {text!r}: expected an index in "
                f"[0, {_MAX_DEVICE_INDEX}]"
            )
    if device.type != "spyre":
        raise ValueError(f"expected a spyre device, got {str(device)!r}")
    if device.index is None:
        return -1
    if not 0 <= device.index <= _MAX_DEVICE_INDEX:
        raise ValueError(
            f"Invalid device index {device.index}: expected an index in [0, {_MAX_DEVICE_INDEX}]"
        )
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
    _C._synchronize(_device_index(device))


def get_amp_supported_dtype():
    return [torch.float16, torch.bfloat16]
