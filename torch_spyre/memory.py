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


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A printable table of the device allocator's statistics, in torch.cuda.memory_summary's
    format (75 columns; the large/small pool rows unless `abbreviated`)."""
    index = _resolved_index(device)
    stats = memory_stats(index)

    def size(value, reference):
        prefix = "B  "
        for next_prefix in ("KiB", "MiB", "GiB", "TiB", "PiB"):
            if reference < 768 * 1024:
                break
            prefix, value, reference = next_prefix, value // 1024, reference / 1024
        return f"{value:6d} {prefix}"

    def count(value, reference):
        prefix = " "
        for next_prefix in ("K", "M"):
            if reference < 750 * 1000:
                break
            prefix, value, reference = next_prefix, value // 1000, reference / 1000
        return f"{value:7d} {prefix} "

    # torch.cuda's rows; "GPU"/"CUDA" become "Spyre" within the same column widths.
    pooled = [
        ("allocated_bytes", "Allocated memory", size),
        ("active_bytes", "Active memory", size),
        ("requested_bytes", "Requested memory", size),
        ("reserved_bytes", "Spyre reserved memory", size),
        ("inactive_split_bytes", "Non-releasable memory", size),
        ("allocation", "Allocations", count),
        ("active", "Active allocs", count),
        ("segment", "Spyre reserved segs", count),
        ("inactive_split", "Non-releasable allocs", count),
    ]
    lines = [
        "=" * 75,
        f" {'':16} PyTorch Spyre memory summary, device ID {index:<16d} ",
        "-" * 75,
        f"  {'':9} Spyre OOMs: {stats['num_ooms']:<11d} | {'':3} segment alloc retries: "
        f"{stats['num_alloc_retries']:<8d}  ",
        "=" * 75,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, name, fmt in pooled:
        lines.append("-" * 75)
        rows = [("all", name)]
        if not abbreviated:
            rows += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        reference = None
        for pool, label in rows:
            values = [stats[f"{key}.{pool}.{field}"] for field in ("current", "peak", "allocated", "freed")]
            reference = reference or values  # every row scales like the "all" row
            cells = " | ".join(fmt(v, r) for v, r in zip(values, reference))
            lines.append(f" {label:<21} | {cells} ")
    for key, name in (("oversize_allocations", "Oversize allocations"),
                      ("oversize_segments", "Oversize segments")):
        lines.append("-" * 75)
        values = [stats[f"{key}.{field}"] for field in ("current", "peak", "allocated", "freed")]
        lines.append(f" {name:<21} | {' | '.join(count(v, v) for v in values)} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"
