"""torch.spyre._utils: the helpers torch's device-generic code looks up on a device
module by torch.cuda's names (torch.serialization calls
`torch.spyre._utils._get_device_index(location, True)` for map_location="spyre:N")."""

import torch

from ._device import _device_index, current_device


def _get_device_index(device, optional: bool = False, allow_cpu: bool = False) -> int:
    """The index of `device` (an int, a str, a torch.device or None), as torch.cuda's.

    An int is returned as it is. A spyre device without an index, or None, is the
    current device when `optional` is True. With `allow_cpu`, a CPU device is -1.
    """
    if isinstance(device, int) and not isinstance(device, bool):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if allow_cpu and device.type == "cpu":
            return -1
        if device.type != "spyre":
            expected = "a spyre or cpu device" if allow_cpu else "a spyre device"
            raise ValueError(f"Expected {expected}, but got: {device}")
    elif device is not None:
        raise ValueError(f"Expected a torch.device, a str or an int, but got: {device!r}")
    index = _device_index(device)
    if index >= 0:
        return index
    if not optional:
        raise ValueError(
            f"Expected a torch.device with a specified index or an integer, but got: {device}"
        )
    return current_device()
