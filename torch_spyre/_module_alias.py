"""`import torch.spyre.X` gives the module torch_spyre.X itself.

torch registers this package as ``torch.spyre`` (``sys.modules["torch.spyre"]``), so
without this finder Python would load ``torch/spyre/X`` a second time from the
package's path under the other name: two module objects, two sets of classes, and
``except torch.spyre.sanitizer.UnsynchronizedAccessError`` would not catch what
``torch_spyre.sanitizer`` raises.
"""

import importlib
import importlib.abc
import importlib.util
import sys

PREFIX = "torch.spyre."


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(PREFIX):
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder: exec_module puts the real module in its place

    def exec_module(self, module):
        # The import system returns whatever sys.modules holds under the name afterwards.
        sys.modules[module.__name__] = importlib.import_module(
            "torch_spyre." + module.__name__[len(PREFIX):])


def install():
    """Once per process; the already-imported submodules get their alias at once."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
    for name, module in list(sys.modules.items()):
        if name.startswith("torch_spyre."):
            sys.modules.setdefault(PREFIX + name[len("torch_spyre."):], module)
