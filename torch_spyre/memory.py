"""Memory functions of torch.spyre, with torch.cuda's names and signatures.

Device memory: thin delegates to torch.accelerator (the caching allocator's
statistics). Pinned host memory: torch 2.13 has no accelerator-generic call for
the host allocator, so these mirror torch.cuda's. docs/tensors.md says what
each statistic counts.
"""

import pickle
import sys
import warnings
from collections import OrderedDict
from inspect import signature
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


# ---------------------------------------------------------------- memory snapshots
# torch.cuda.memory's private snapshot API, in CUDA's format, so torch.cuda._memory_viz and
# pytorch.org/memory_viz read spyre snapshots unchanged (docs/tensors.md, "Memory snapshots").

_CONTEXT_LEVELS = {None: 0, "state": 1, "alloc": 2, "all": 3}  # c10's RecordContext
_TRACE_ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                  "segment_map", "segment_unmap", "snapshot", "oom")


def _record_memory_history(enabled="all", *args, **kwargs) -> None:
    """Record the device allocator's actions and the Python stacks behind them, as
    torch.cuda.memory._record_memory_history: `enabled` None (stop and drop the trace), "state"
    (stacks of live blocks only) or "all" (also a trace of every action, at most `max_entries`,
    newest kept); `context` None, "state", "alloc" or "all" (also stacks of frees); `stacks`
    "python" or "all" (also C++ frames). A bool `enabled` takes torch's legacy arguments."""
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _choice(name, value, choices):
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices)
        raise ValueError(f"_record_memory_history: {name}={value!r} is not one of {expected}")


def _record_memory_history_impl(
    enabled="all",
    context="all",
    stacks="all",
    max_entries=sys.maxsize,
    device=None,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
) -> None:
    _choice("enabled", enabled, ("state", "all", None))
    _choice("context", context, ("state", "alloc", "all", None))
    _choice("stacks", stacks, ("python", "all"))
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"_record_memory_history: max_entries={max_entries!r} is not an int >= 0")
    skip_actions = list(skip_actions or [])
    for action in skip_actions:
        _choice("skip_actions entry", action, _TRACE_ACTIONS)
    if device is not None:
        _resolved_index(device)  # one device per process: another one raises
    if compile_context or global_record_annotations:
        warnings.warn("torch.spyre.memory._record_memory_history: compile_context and "
                      "global_record_annotations are not recorded on spyre", stacklevel=3)
    # As CUDA: "state" keeps one trace entry.
    max_entries = max_entries if enabled == "all" else 1
    _C._memory_record_history(enabled is not None, _CONTEXT_LEVELS[context], stacks == "all",
                              min(max_entries, sys.maxsize), bool(clear_history), skip_actions)


_record_memory_history.__signature__ = signature(_record_memory_history_impl)


def _record_memory_history_legacy(
    enabled: bool,
    record_context=True,
    trace_alloc_max_entries=1,
    trace_alloc_record_context=False,
    device=None,
    record_context_cpp=False,
    clear_history=False,
    compile_context=False,
    global_record_annotations=False,
    skip_actions=None,
) -> None:
    """torch's older form: a bool `enabled`, the trace size and what to keep stacks for."""
    if not enabled:
        context = None
    elif trace_alloc_record_context:
        context = "alloc"
    else:
        context = "state" if record_context else None
    if device is not None:
        _resolved_index(device)
    if isinstance(trace_alloc_max_entries, bool) or not isinstance(trace_alloc_max_entries, int) \
            or trace_alloc_max_entries < 0:
        raise ValueError("_record_memory_history: trace_alloc_max_entries="
                         f"{trace_alloc_max_entries!r} is not an int >= 0")
    skip_actions = list(skip_actions or [])
    for action in skip_actions:
        _choice("skip_actions entry", action, _TRACE_ACTIONS)
    _C._memory_record_history(bool(enabled), _CONTEXT_LEVELS[context], bool(record_context_cpp),
                              trace_alloc_max_entries, bool(clear_history), skip_actions)


def _snapshot(device=None, augment_with_fx_traces=False) -> "dict[str, Any]":
    """The device allocator's state and trace, as torch.cuda.memory._snapshot(): `segments`
    (every runtime allocation with its blocks, their state and allocation stacks) and
    `device_traces` (one list per visible device: the recorded actions, oldest first). Reads
    the allocator only: it does not start the runtime."""
    raw = _C._memory_snapshot()
    traces = [[] for _ in range(_C.device_count())]
    for entry in raw["trace"]:
        traces[entry.pop("device")].append(entry)
    snapshot = {"segments": raw["segments"], "device_traces": traces}
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces

        snapshot = _augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False) -> None:
    """Pickle _snapshot() to `filename`, for pytorch.org/memory_viz or torch.cuda._memory_viz."""
    snapshot = _snapshot(augment_with_fx_traces=augment_with_fx_traces)
    with open(filename, "wb") as f:
        pickle.dump(snapshot, f)
