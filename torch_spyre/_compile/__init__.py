"""torch.compile for spyre: dynamo's device interface and inductor's backend.

Nothing here is imported by ``import torch``: dynamo and inductor cost seconds
to import. Each piece is registered once the torch module it registers with has
loaded (torch_spyre/_patches/after_import.py's `when_imported`): dynamo's device interface
with dynamo's device registry; inductor's backend (its code generators, its
cache-key pass, CPU's choices and the patches they need) with inductor's
compile_fx, before anything is compiled; reduce-overhead's graph policy with
inductor's graph utilities. Each is first checked against the torch it was
written for (_patches.check): a feature whose torch internals differ is
disabled with one warning instead.
"""

from .. import _patches

_DYNAMO_REGISTRY = "torch._dynamo.device_interface"
_COMPILE_FX = "torch._inductor.compile_fx"
_CUDAGRAPH_UTILS = "torch._inductor.cudagraph_utils"


def _register_device_interface(registry):
    if not _patches.check(_patches.INTERFACE):
        return
    from .device_interface import SpyreInterface

    registry.register_interface_for_device("spyre", SpyreInterface)
    for index in range(SpyreInterface.device_count()):
        registry.register_interface_for_device(f"spyre:{index}", SpyreInterface)


def _register_inductor_backend(compile_fx):
    from . import inductor

    if not _patches.check(_patches.COMPILE):
        inductor.register_disabled_backend(_patches.disabled_reason(_patches.COMPILE))
        return
    from .cpu_choices import register_cpus_choices

    _patches.apply_inductor_patches()
    register_cpus_choices()
    inductor.register_backend()


def _install_graph_policy(cudagraph_utils):
    from .graphs import install

    install(cudagraph_utils)


def register_when_dynamo_loads():
    _patches.when_imported(_DYNAMO_REGISTRY, _register_device_interface)
    _patches.when_imported(_COMPILE_FX, _register_inductor_backend)
    # reduce-overhead's spyre graphs (graphs.py): before inductor compiles or loads a graph.
    _patches.when_imported(_CUDAGRAPH_UTILS, _install_graph_policy)
