"""Every replacement of a torch internal that torch_spyre makes, in one package, each checked
(docs/compile.md, "Patched torch internals").

torch_spyre registers itself through torch's extension points where torch offers one (the
PrivateUse1 device module, inductor's register_backend_for_device with a device_custom_pass,
register_device_op_overrides, register_lowering, dynamo's register_interface_for_device,
config.cudagraph_policy). What torch 2.13 offers no extension point for is replaced here, and
nowhere else in the package: one module per feature, named after what it does, and each patch
in it says why it exists, what it changes and which upstream API would retire it.

ledger.py records, for every feature, the torch internals it relies on and their hashes in the
torch this code was written against, and checks them before any of the feature's patches is
applied (a mismatch disables the feature with one warning). Patches are applied once, for every
thread alike, and never changed afterwards.

The names below are the package's API (`_patches.check(_patches.COMPILE)`, ...): the rest of
torch_spyre calls them through the package, not through its modules.
"""

from .after_import import when_imported
from .device_layout_guard import guard_device_layouts
from .device_layout_keyword import wrap_device_layouts
from .graph_device_check import apply_graph_device_check
from .host_copy_printing import print_from_host_copy
from .inductor_as_cpu import apply_inductor_patches, devices_answer_cpu_for_spyre
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
    check,
    current_fingerprints,
    disabled_message,
    disabled_reason,
    fingerprint,
    print_fingerprints,
    report,
)
from .profiler_exit_flag import wrap_profiler_exit
from .sanitizer_host_reads import unwrap_host_reads, wrap_host_reads
from .submodule_aliases import install_aliases

__all__ = [
    "ALIASES", "COMPILE", "GRAPHS", "HOST_READS", "INTERFACE", "LAYOUT_GUARD", "LAYOUTS",
    "PREMISES", "PRINTING", "PROFILER_EXIT", "TARGETS", "WRITTEN_AGAINST",
    "apply_graph_device_check", "apply_inductor_patches", "check", "current_fingerprints",
    "devices_answer_cpu_for_spyre", "disabled_message", "disabled_reason", "fingerprint",
    "guard_device_layouts", "install_aliases", "print_fingerprints", "print_from_host_copy",
    "report", "unwrap_host_reads", "when_imported", "wrap_device_layouts", "wrap_host_reads",
    "wrap_profiler_exit",
]
