"""Every replacement of a torch internal that torch_spyre makes, in one package, each checked
(docs/compile.md, "Patched torch internals"): ledger.py.

The names below are the package's API (`_patches.check(_patches.COMPILE)`, ...): the rest of
torch_spyre calls them through the package, not through its modules.
"""

from .ledger import (
    ALIASES,
    COMPILE,
    GRAPHS,
    HOST_READS,
    INTERFACE,
    LAYOUT_GUARD,
    LAYOUTS,
    PREMISES,
    PRINTING,
    PROFILER_EXIT,
    TARGETS,
    WRITTEN_AGAINST,
    apply_graph_device_check,
    apply_inductor_patches,
    check,
    current_fingerprints,
    devices_answer_cpu_for_spyre,
    disabled_message,
    disabled_reason,
    fingerprint,
    guard_device_layouts,
    install_aliases,
    print_fingerprints,
    print_from_host_copy,
    report,
    unwrap_host_reads,
    when_imported,
    wrap_device_layouts,
    wrap_host_reads,
    wrap_profiler_exit,
)

__all__ = [
    "ALIASES", "COMPILE", "GRAPHS", "HOST_READS", "INTERFACE", "LAYOUT_GUARD", "LAYOUTS",
    "PREMISES", "PRINTING", "PROFILER_EXIT", "TARGETS", "WRITTEN_AGAINST",
    "apply_graph_device_check", "apply_inductor_patches", "check", "current_fingerprints",
    "devices_answer_cpu_for_spyre", "disabled_message", "disabled_reason", "fingerprint",
    "guard_device_layouts", "install_aliases", "print_fingerprints", "print_from_host_copy",
    "report", "unwrap_host_reads", "when_imported", "wrap_device_layouts", "wrap_host_reads",
    "wrap_profiler_exit",
]
