"""The card time model (FLEX_STUB_TIMING=card, docs/timing.md): the profile of
the card it predicts and a summary of the modeled timeline."""

import torch

from . import _C


def timing_model() -> str:
    """'card' when device time is the card's modeled time, 'host' when it is the
    emulator's own (FLEX_STUB_TIMING, read when the runtime starts)."""
    return "card" if _C._card_timing() else "host"


def card_profile() -> dict:
    """The card's constants the model uses (docs/timing.md names each source):
    cores, matmul_mac_per_ns_per_core, memory_gb_per_s, rw_turnaround_ns_per_byte,
    broadcast_gb_per_s, reduction_*, host_link_gb_per_s, collective_link_gb_per_s,
    host_prep_us. 1 GB/s is 1e9 bytes per second (one byte per ns)."""
    return _C._card_profile()


# Kernel classes in flex::WorkCost::Class order, and each class's error as
# upstream's cost model publishes it (RMS % against its device measurements;
# docs/timing.md). None: no published figure.
_KERNEL_CLASSES = (
    ("uncounted", None),
    ("pointwise", (8.5, 8.5)),
    ("matmul", (25.1, 29.8)),
    ("batched matmul", (26.5, 40.0)),
    ("projection matmul", (5.6, 5.6)),
    ("softmax and norms", (21.1, 21.1)),
    ("reduction", (7.2, 7.2)),
    ("data movement", (6.1, 6.1)),
)


def card_summary(reset: bool = False) -> dict:
    """The modeled timeline of the current device since the runtime started (or
    the last reset), in milliseconds of card time:

    total_ms: first modeled start to last modeled end; busy_ms: the sum of every
    operation's modeled duration (what one stream would take); compute_ms,
    copy_ms, collective_ms, other_ms: busy_ms by kind; active_ms: time with at
    least one operation running; overlap_saved_ms: busy_ms - active_ms, the time
    streams saved by overlapping; streams: {stream id: busy ms}; classes:
    {class: {"ms": busy ms, "error_pct": (low, high) or None}} for the classes
    that ran: kernels by class (matmul, batched matmul, projection matmul,
    pointwise, softmax and norms, reduction, data movement, uncounted) with
    the error upstream's cost model publishes for the class, then copies,
    collectives and delays (no published error).

    `reset=True` starts the totals again after reading them (the timeline itself
    goes on). Raises RuntimeError when the card time model is off."""
    if not _C._card_timing():
        raise RuntimeError(
            "torch.spyre.card_summary: the card time model is off "
            f"(FLEX_STUB_TIMING is {timing_model()!r}; set FLEX_STUB_TIMING=card before the "
            "runtime starts)"
        )
    raw = _C._card_summary()
    if reset:
        _C._card_reset()
    ms = 1e-6
    return {
        "total_ms": (raw["end_ns"] - raw["start_ns"]) * ms,
        "busy_ms": raw["busy_ns"] * ms,
        "compute_ms": raw["compute_ns"] * ms,
        "copy_ms": raw["copy_ns"] * ms,
        "collective_ms": raw["collective_ns"] * ms,
        "other_ms": raw["other_ns"] * ms,
        "active_ms": raw["union_ns"] * ms,
        "overlap_saved_ms": (raw["busy_ns"] - raw["union_ns"]) * ms,
        "streams": {stream: busy * ms for stream, busy in sorted(raw["streams"].items())},
        "classes": _classes(raw, ms),
    }


def _classes(raw: dict, ms: float) -> dict:
    classes = {}
    for (name, error), ns in zip(_KERNEL_CLASSES, raw["class_ns"]):
        if ns:
            classes[name] = {"ms": ns * ms, "error_pct": error}
    for name, key in (("copies", "copy_ns"), ("collectives", "collective_ns"),
                      ("delays", "other_ns")):
        if raw[key]:
            classes[name] = {"ms": raw[key] * ms, "error_pct": None}
    return classes


def format_card_summary(summary: dict) -> str:
    """card_summary()'s time by class as lines a user plans with:
    "batched matmul: 4.100000 ms ± 26.5-40 %" (the class's published error)."""
    lines = []
    for name, entry in summary["classes"].items():
        error = entry["error_pct"]
        if error is None:
            bound = " (no published error)"
        elif error[0] == error[1]:
            bound = f" ± {error[1]:g} %"
        else:
            bound = f" ± {error[0]:g}-{error[1]:g} %"
        lines.append(f"{name}: {entry['ms']:.6f} ms{bound}")
    lines.append(f"total: {summary['total_ms']:.6f} ms (busy {summary['busy_ms']:.6f} ms, "
                 f"overlap saved {summary['overlap_saved_ms']:.6f} ms)")
    return "\n".join(lines)


# Bytes each card sends over its link, as a multiple of the collective's bytes
# B (the spyre tensors it writes) on `world` cards: ring algorithms for the
# all-to-all patterns, one transfer of B for the rooted ones (docs/timing.md).
_LINK_FACTORS = {
    "allreduce": lambda w: 2 * (w - 1) / w,
    "allgather": lambda w: (w - 1) / w,
    "all_gather_single": lambda w: (w - 1) / w,
    "all_gather_single_coalesced": lambda w: (w - 1) / w,
    "all_to_all_single": lambda w: (w - 1) / w,
    "reduce_scatter_single": lambda w: w - 1,  # B is one shard
    "reduce_scatter_single_coalesced": lambda w: w - 1,
}


def _spyre_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes if value.device.type == "spyre" else 0
    if isinstance(value, (list, tuple)):
        return sum(_spyre_bytes(v) for v in value)
    return 0


def _link_bytes(name: str, outputs, world: int) -> int:
    if world <= 1:
        return 0
    factor = _LINK_FACTORS.get(name, lambda w: 1)(world)
    return int(round(factor * _spyre_bytes(outputs)))


def _charge_collective(comm, name: str, outputs, world: int) -> None:
    """With card timing: the collective on the modeled timeline of `comm` (the
    group's stream), after the caller's stream reaches the call. The emulator
    runs the collective on the host; this only adds its modeled link time."""
    called = torch.spyre.Event()
    called.record(torch.spyre.current_stream())
    comm.wait_event(called)
    _C._card_collective(comm.stream_id, comm.device_index, f"spyreccl:{name}",
                        _link_bytes(name, outputs, world))
