"""Import machinery (Python's, not torch's; the modules it acts on are torch's): a callback
once a torch module has loaded, which is when the features that patch it are checked and
applied."""

import importlib.abc
import importlib.util
import sys


class AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs a callback once a module has executed.

    Why: torch offers no hook after its lazily imported compiler modules load (dynamo's
    device registry is imported in the middle of dynamo's own import; inductor's at the first
    compile), and importing them at `import torch` costs seconds.
    Changes: the loader of that one module, for its first import only (the finder removes
    itself at once).
    Retired by: a device-module hook torch calls when dynamo/inductor first load (as
    init_backend_registration asks the device module for its code generators)."""

    def __init__(self, name, callback):
        self.name, self.callback, self.loader = name, callback, None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        self.callback(module)


def when_imported(name, callback):
    """callback(module) once the module `name` has executed (at once if it has)."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, AfterImport(name, callback))
