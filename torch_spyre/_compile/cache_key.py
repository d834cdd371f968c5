"""Spyre's code generation in inductor's cache key.

Inductor caches compiled graphs on disk (FxGraphCache) under a key made of
the graph, torch's own sources and inductor's config, not of an out-of-tree
backend's code generation: a graph compiled by an older torch_spyre would be
reused after torch_spyre's code generation changed. A backend's custom pass
is part of the key (its uuid()), so spyre registers one (register_backend_for_device's
device_custom_pass, inductor.py) that does nothing to the graph and whose uuid is the
hash of the code generation's sources (this folder and torch_spyre/_patches/), and
whether spyre's graph policy is in force (the device check's verdict, cached with the
graph, depends on it: graphs.policy_in_force).
"""

from pathlib import Path

from torch._inductor.custom_graph_pass import CustomGraphModulePass, get_hash_for_files


class SpyreCodegenVersion(CustomGraphModulePass):
    def __call__(self, gm):
        pass

    def uuid(self):
        import torch._inductor.cudagraph_utils  # noqa: F401 (installs spyre's policy first)

        from . import graphs

        package = Path(__file__).parent
        sources = [*package.glob("*.py"), *(package.parent / "_patches").glob("*.py")]
        files = get_hash_for_files(tuple(sorted(str(p) for p in sources)))
        return files + (b"graphs" if graphs.policy_in_force() else b"no graphs")
