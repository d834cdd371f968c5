"""Memory functions of torch.spyre, with torch.cuda's names and signatures.

Device memory: thin delegates to torch.accelerator (the caching allocator's
statistics). Pinned host memory: torch 2.13 has no accelerator-generic call for
the host allocator, so these mirror torch.cuda's. docs/tensors.md says what
each statistic counts.
"""

from collections import OrderedDict
from typing import Any

import torch

from . import _C
from ._device import _resolved_index


def memory_stats(device=None) -> "OrderedDict[str, Any]":
    """The device allocator's statistics (torch.cuda.memory_stats's keys)."""
    return torch.accelerator.memory_stats(_resolved_index(device))


def memory_allocated(device=None) -> int:
    """Bytes held by tensors (sizes rounded as allocated)."""
    return torch.accelerator.memory_allocated(_resolved_index(device))


def max_memory_allocated(device=None) -> int:
    return torch.accelerator.max_memory_allocated(_resolved_index(device))


def memory_reserved(device=None) -> int:
    """Bytes of device memory the allocator holds: tensors plus cached blocks."""
    return torch.accelerator.memory_reserved(_resolved_index(device))


def max_memory_reserved(device=None) -> int:
    return torch.accelerator.max_memory_reserved(_resolved_index(device))


def reset_peak_memory_stats(device=None) -> None:
    torch.accelerator.reset_peak_memory_stats(_resolved_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_resolved_index(device))


def empty_cache() -> None:
    """Return every cached, unused segment to the runtime."""
    torch.accelerator.empty_cache()


def mem_get_info(device=None) -> "tuple[int, int]":
    """(free, total) bytes of device memory, from the runtime (cached segments count as used)."""
    return torch.accelerator.get_memory_info(_resolved_index(device))


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
