"""torch_spyre: IBM Spyre as a PyTorch device (PrivateUse1, named "spyre").

`import torch` loads this package through the `torch.backends` entry point, so
users never import it themselves: `torch.spyre` is this module. Importing it
registers the device but does not start the runtime; the first device use does.
"""

import sys


def _autoload() -> None:
    """Entry point of the torch.backends group: importing the package did the work.

    Defined before `import torch`: when a user imports torch_spyre first, torch's
    autoload re-enters this half-imported module and only needs this name; the
    registration below then runs once torch has finished importing.
    """


import torch  # noqa: E402

# Loading _C registers the device guard, hooks, allocators and kernels.
from . import _C  # noqa: F401,E402
from ._device import (  # noqa: F401
    _is_in_bad_fork,
    _lazy_init,
    current_device,
    device_count,
    get_amp_supported_dtype,
    init,
    is_available,
    is_initialized,
    set_device,
    synchronize,
)
from .errors import (  # noqa: F401
    SpyreDeviceState,
    SpyreStreamError,
    get_device_state,
    stream_get_error,
    stream_get_error_string,
)
from .events import Event  # noqa: F401
from .memory import (  # noqa: F401
    host_memory_stats,
    reset_accumulated_host_memory_stats,
    reset_peak_host_memory_stats,
)
from .random import (  # noqa: F401
    get_rng_state,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
)
from .streams import (  # noqa: F401
    Stream,
    StreamContext,
    _sleep,
    current_stream,
    default_stream,
    set_stream,
    stream,
)


def _register() -> None:
    """Name PrivateUse1 "spyre" and expose this module as torch.spyre (once)."""
    if getattr(torch, "spyre", None) is sys.modules[__name__]:
        return
    torch.utils.rename_privateuse1_backend("spyre")
    torch._register_device_module("spyre", sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


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


_register()
_register_spyreccl()
