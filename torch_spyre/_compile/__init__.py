"""torch.compile for spyre: dynamo's device interface and inductor's backend.

Nothing here is imported by ``import torch``: dynamo and inductor cost seconds
to import. Inductor finds its backend through the device module
(``torch.spyre.Scheduling`` etc., resolved lazily by torch_spyre/__init__.py);
dynamo's device interface is registered when dynamo's device registry is first
imported, and reduce-overhead's graph policy when inductor's graph utilities are
(``register_when_dynamo_loads``).
"""

import importlib.abc
import sys

_DYNAMO_REGISTRY = "torch._dynamo.device_interface"
_CUDAGRAPH_UTILS = "torch._inductor.cudagraph_utils"


def _register_device_interface(registry):
    from .device_interface import SpyreInterface

    registry.register_interface_for_device("spyre", SpyreInterface)
    for index in range(SpyreInterface.device_count()):
        registry.register_interface_for_device(f"spyre:{index}", SpyreInterface)


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a callback once a module has executed: the registry module is
    imported in the middle of dynamo's own import, so there is no later hook."""

    def __init__(self, name, callback):
        self.name, self.callback, self.loader = name, callback, None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.callback(module)


def _install_graph_policy(cudagraph_utils):
    from .graphs import install

    install(cudagraph_utils)


def _when_imported(name, callback):
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


def register_when_dynamo_loads():
    _when_imported(_DYNAMO_REGISTRY, _register_device_interface)
    # reduce-overhead's spyre graphs (graphs.py): before inductor compiles or loads a graph.
    _when_imported(_CUDAGRAPH_UTILS, _install_graph_policy)
