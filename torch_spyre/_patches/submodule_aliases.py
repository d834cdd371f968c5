"""Feature ALIASES: `import torch.spyre.X` gives the module torch_spyre.X itself."""

import importlib
import importlib.abc
import importlib.util
import sys

from .ledger import ALIASES, check

_ALIAS_PREFIX = "torch.spyre."


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import torch.spyre.X` gives the module torch_spyre.X itself.

    Why: torch registers the device module as sys.modules["torch.spyre"]
    (torch._register_device_module), so Python would load torch_spyre/X a second time under
    the other name: two module objects, two sets of classes (`except
    torch.spyre.sanitizer.UnsynchronizedAccessError` would not catch what
    torch_spyre.sanitizer raises).
    Changes: imports of names under torch.spyre. only.
    Retired by: torch._register_device_module registering the package's submodules (or a
    device-module package path torch resolves to the real package)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_ALIAS_PREFIX):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder: exec_module puts the real module in its place

    def exec_module(self, module):
        # The import system returns whatever sys.modules holds under the name afterwards.
        sys.modules[module.__name__] = importlib.import_module(
            "torch_spyre." + module.__name__[len(_ALIAS_PREFIX):])


def install_aliases():
    """Once per process; the already-imported submodules get their alias at once."""
    if not check(ALIASES):
        return
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
    for name, module in list(sys.modules.items()):
        if name.startswith("torch_spyre."):
            sys.modules.setdefault(_ALIAS_PREFIX + name[len("torch_spyre."):], module)
