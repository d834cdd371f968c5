"""Pinned host memory statistics (torch.spyre.host_memory_stats, ...).

Device memory statistics are torch.accelerator's (memory_stats, memory_allocated,
...); torch 2.13 has no accelerator-generic call for the host allocator, so these
mirror torch.cuda's. docs/tensors.md, "Pinned host memory", says what they count.
"""

from collections import OrderedDict
from typing import Any

from . import _C


def host_memory_stats() -> "OrderedDict[str, Any]":
    """The pinned host allocator's statistics, flattened as torch.cuda.host_memory_stats."""
    flat = []

    def flatten(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                flatten(f"{prefix}.{key}" if prefix else key, item)
        else:
            flat.append((prefix, value))

    flatten("", _C._host_memory_stats())
    return OrderedDict(sorted(flat))


def reset_accumulated_host_memory_stats() -> None:
    """Zero the "allocated"/"freed" counts and the timing totals of the host statistics."""
    _C._host_reset_accumulated_stats()


def reset_peak_host_memory_stats() -> None:
    """Set every host "peak" to its current value."""
    _C._host_reset_peak_stats()
