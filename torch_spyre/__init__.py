"""torch_spyre: IBM Spyre as a PyTorch device (PrivateUse1, named "spyre").

`import torch` loads this package through the `torch.backends` entry point, so
users never import it themselves: `torch.spyre` is this module. Importing it
registers the device but does not start the runtime; the first device use does.
"""

import sys as _sys


def _autoload() -> None:
    """Entry point of the torch.backends group: importing the package did the work.

    Defined before `import torch`: when a user imports torch_spyre first, torch's
    autoload re-enters this half-imported module and only needs this name; the
    registration below then runs once torch has finished importing.
    """


# Imported under private names so that dir(torch.spyre) is the API (__all__)
# and the package's own submodules.
import torch as _torch  # noqa: E402

# Loading _C registers the device guard, hooks, allocators and kernels.
from . import _C, _compile  # noqa: F401,E402
from . import _autograd_exit  # noqa: F401,E402  (clean exit after backward)
from . import _utils  # noqa: F401,E402  (torch.serialization reads torch.spyre._utils)
from . import _patches  # noqa: E402
from . import _profiler_exit  # noqa: E402
# _is_in_bad_fork and _lazy_init are for torch, _sleep for tests and demos.
from ._device import (  # noqa: F401,E402
    _is_in_bad_fork,
    _lazy_init,
    card_rules,
    current_device,
    device,
    device_count,
    device_of,
    get_amp_supported_dtype,
    get_device_capability,
    get_device_name,
    get_device_properties,
    get_downcast_warning,
    init,
    is_available,
    is_bf16_supported,
    is_initialized,
    numerics,
    numerics_report,
    set_device,
    set_downcast_warning,
    synchronize,
)
from .errors import (  # noqa: E402
    SpyreDeviceState,
    SpyreStreamError,
    get_device_state,
    stream_get_error,
    stream_get_error_string,
)
from .events import Event  # noqa: E402
from .layouts import DataFormats, SpyreTensorLayout, get_device_dtype  # noqa: E402
from .memory import (  # noqa: E402
    empty_cache,
    host_memory_stats,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_stats,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
)
from .random import (  # noqa: E402
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from . import sanitizer  # noqa: E402
from .graphs import Graph, graph, graph_pool_handle, is_current_stream_capturing  # noqa: E402
from .streams import (  # noqa: F401,E402
    Stream,
    StreamContext,
    _sleep,
    current_stream,
    default_stream,
    host_compute_stream,
    set_stream,
    stream,
)
from .sync_debug import get_sync_debug_mode, set_sync_debug_mode  # noqa: E402
from ._timing import card_profile, card_summary, format_card_summary, timing_model  # noqa: E402

__all__ = [
    # device
    "current_device", "device", "device_count", "device_of", "get_amp_supported_dtype",
    "get_device_capability", "get_device_name", "get_device_properties", "init",
    "is_available", "is_bf16_supported", "is_initialized", "set_device", "synchronize",
    "get_downcast_warning", "set_downcast_warning", "card_rules", "numerics", "numerics_report",
    # streams and events
    "Event", "Stream", "StreamContext", "current_stream", "default_stream",
    "host_compute_stream", "set_stream", "stream",
    # memory
    "empty_cache", "host_memory_stats", "max_memory_allocated", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats", "memory_summary",
    "reset_accumulated_host_memory_stats", "reset_accumulated_memory_stats",
    "reset_peak_host_memory_stats", "reset_peak_memory_stats",
    # random
    "get_rng_state", "get_rng_state_all", "initial_seed", "manual_seed", "manual_seed_all",
    "seed", "seed_all", "set_rng_state", "set_rng_state_all",
    # errors
    "SpyreDeviceState", "SpyreStreamError", "get_device_state", "stream_get_error",
    "stream_get_error_string",
    # sync debug mode
    "get_sync_debug_mode", "set_sync_debug_mode",
    # graphs
    "Graph", "graph", "graph_pool_handle", "is_current_stream_capturing",
    # upstream torch-spyre's
    "get_diagnostic_report", "make_spyre_module",
    # device layouts (upstream torch-spyre's)
    "DataFormats", "SpyreTensorLayout", "get_device_dtype",
    # the card time model
    "card_profile", "card_summary", "format_card_summary", "timing_model",
]


def get_diagnostic_report(output_dir=None):
    """The newest diagnostic (FFDC) report as a dict, or None (torch_spyre.profiler's;
    docs/profiling.md, "Diagnostic reports"). Loads the profiler package at the first call."""
    from .profiler import get_diagnostic_report as newest

    return newest(output_dir)


def make_spyre_module():
    """The module torch registers as torch.spyre: this package.

    Upstream torch-spyre builds its device module here (a new module object per call,
    over per-process state) and registers the result. Here the package itself is the
    device module and all its state is the process's, so every call returns the same
    module and changes nothing: it does not register anything.
    """
    return _sys.modules[__name__]


def _register() -> None:
    """Name PrivateUse1 "spyre" and expose this module as torch.spyre (once)."""
    if getattr(_torch, "spyre", None) is _sys.modules[__name__]:
        return
    _torch.utils.rename_privateuse1_backend("spyre")
    _torch._register_device_module("spyre", _sys.modules[__name__])
    _patches.install_aliases()  # torch.spyre.X is torch_spyre.X
    _profiler_exit.install()  # the profiler's stop survives a device fault
    _patches.print_from_host_copy()  # repr/str format one host copy (a card has no float64)
    _torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    # Upstream torch-spyre's layout API (docs/tensors.md, "Device layouts").
    from . import _device_layouts

    _torch.Tensor.device_tensor_layout = _device_layouts.device_tensor_layout
    _patches.wrap_device_layouts()
    _patches.when_imported("torch._dynamo.guards", _patches.guard_device_layouts)
    from . import _trainer_device

    _trainer_device.install()  # a Trainer whose devices disagree stops at its start


def _register_spyreccl() -> None:
    """Register the c10d backend "spyreccl", the default for spyre (docs/distributed.md).

    torch.distributed is imported here, not at module level, and only when torch
    was built with it; torch_spyre.distributed itself loads at the first
    process group that uses the backend.
    """
    import torch.distributed as dist

    if not dist.is_available() or "spyreccl" in dist.Backend.backend_list:
        return

    def create(common_opts, backend_opts):
        from .distributed import create_backend

        return create_backend(common_opts, backend_opts)

    dist.Backend.register_backend("spyreccl", create, extended_api=True, devices=["spyre"])


def _get_generator(device: _torch.device) -> _torch.Generator:
    """The default generator of `device` (torch.cuda's helper: aot_autograd asks for it)."""
    from .random import _generator

    return _generator(device if device.index is not None else None)


# Module attributes that torch's device-generic code reads by torch.cuda's names and
# whose value is state: computed at each read, as torch.cuda's globals are kept current.
def _initialized_now() -> bool:
    # torch.utils.checkpoint saves and restores the device's RNG state around a
    # recomputation only when this is true (torch.cuda: lazy init ran, not a bad fork).
    return is_initialized() and not _is_in_bad_fork()


def _default_generators() -> tuple:
    return tuple(_C._get_default_generator(index) for index in range(device_count()))


_DYNAMIC_ATTRIBUTES = {"_initialized": _initialized_now, "default_generators": _default_generators}


def __getattr__(name):
    if name in _DYNAMIC_ATTRIBUTES:
        return _DYNAMIC_ATTRIBUTES[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_register()
_register_spyreccl()
sanitizer._enable_from_environment()
_compile.register_when_dynamo_loads()
