"""Spyre's code generation in inductor's cache key.

Inductor caches compiled graphs on disk (FxGraphCache) under a key made of
the graph, torch's own sources and inductor's config, not of an out-of-tree
backend's code generation: a graph compiled by an older torch_spyre would be
reused after torch_spyre's code generation changed. A backend's custom pass
is part of the key (its uuid()), so spyre registers one that does nothing to
the graph and whose uuid is the hash of the code generation's sources.
"""

from pathlib import Path

from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files


class SpyreCodegenVersion(CustomGraphModulePass):
    def __call__(self, gm):
        pass

    def uuid(self):
        return get_hash_for_files(tuple(sorted(str(p) for p in Path(__file__).parent.glob("*.py"))))


def install():
    """Every registration of the spyre backend carries the pass. Inductor
    registers spyre's backend (init_backend_registration) right after it has
    imported it, i.e. after this runs: so the registration function is wrapped
    for that call, and the pass is also set for a registration already made."""
    from torch._inductor.codegen import common

    version = SpyreCodegenVersion()
    original = common.register_backend_for_device

    def register_backend_for_device(device, *args, **kwargs):
        if device == "spyre" and kwargs.get("device_custom_pass") is None and len(args) < 5:
            kwargs["device_custom_pass"] = version
        return original(device, *args, **kwargs)

    common.register_backend_for_device = register_backend_for_device
    if "spyre" in common.device_codegens:
        common.custom_backend_passes["spyre"] = version
