"""The ledger of torch internals each feature of this package relies on, and the self-check
that guards them (docs/compile.md, "Patched torch internals").

Every patch belongs to one feature and names its targets: the torch functions it replaces or
whose behaviour it reproduces (or, for the import finder that acts on Python's import system,
the premise it relies on: PREMISES). Before a feature's patches are applied (at `import torch` for
the aliases and the sanitizer's host reads; when inductor's compile_fx module is imported for
torch.compile, before anything is compiled; when cudagraph_utils is imported for
reduce-overhead), each target's source is hashed and compared with the hash recorded for the
torch this code was written against (WRITTEN_AGAINST). On a mismatch the feature is disabled
with one warning naming the torch version and the feature, and nothing of it is patched:
torch.compile on spyre then raises, reduce-overhead on spyre runs without graphs (inductor's
own skip), and so on (`report()` lists each feature's state). Inductor's patches are applied as
its compile_fx module finishes loading: every inductor compile imports it first, and Python's
import lock holds any other thread importing it until the hook has run, so no compile sees a
half-patched torch and no torch module global changes while one runs (what depends on the
lowering in progress is thread-local state the patch reads).

`print_fingerprints()` prints the targets' hashes in the installed torch (to record a new one).
"""

import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import sys
import threading
import warnings

import torch

from .after_import import AfterImport

WRITTEN_AGAINST = "2.13.0"

# Features, by the name the warning and report() give them.
COMPILE = "torch.compile on spyre (inductor)"
GRAPHS = "torch.compile(mode=\"reduce-overhead\") spyre graphs"
INTERFACE = "dynamo's spyre device interface (streams and events in compiled code)"
ALIASES = "torch.spyre.<submodule> imports"
HOST_READS = "the stream sanitizer's checks of Tensor.numpy() and Tensor.tolist()"
PROFILER_EXIT = "a profile that completes despite a device fault"
LAYOUTS = "upstream's device_layout= on Tensor.to and torch.empty/zeros/ones/full"
LAYOUT_GUARD = "torch.compile's guard on spyre tensors' device layouts"
PRINTING = "printing spyre tensors from one host copy"


def _attr(path):
    """The object at a dotted path whose leading part is a module (imported if needed)."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _decomposition(op_name):
    def resolve():
        from torch._inductor import decomposition

        return decomposition.decompositions[_attr("torch.ops." + op_name)]

    return resolve


def _lowering(op_name):
    def resolve():
        from torch._inductor import lowering

        return lowering.lowerings[_attr("torch.ops." + op_name)]

    return resolve


# Each feature's targets: a name, how to find it (a dotted path or a function), and the hash
# of its source in torch 2.13.0 (of its qualified name for a builtin). A decorated function's
# source is its undecorated definition's.
TARGETS = {
    COMPILE: {
        # Replaced (the patches below).
        "torch._inductor.utils.get_current_backend": "3e7a48839289d439",
        # Where it is replaced: every module naming it (inductor_as_cpu's
        # _MODULES_USING_GET_CURRENT_BACKEND), so a module that starts importing it by name
        # disables the feature.
        "modules of torch._inductor naming get_current_backend": "2bcfbcf196a29707",
        "torch._inductor.scheduler.BaseSchedulerNode.is_cpu": "3abf458ee46f55f4",
        "torch._inductor.scheduler.Scheduler.codegen_extern_call": "f6e815ff784b99c1",
        "torch._inductor.ir.is_cpu": "7600732460adc67b",
        "torch._inductor.ir.get_device_type": "e31de2455e0d9f29",
        "torch._inductor.ir.is_triton": "c3e9e81077bcc8ce",
        "torch._inductor.lowering.use_two_step_variance": "93f9bcc5e9663c2f",
        "torch._inductor.lowering.div_prim": "75e87a9bf283a7c2",
        "torch._inductor.lowering._make_reduction_inner": "1c4d173a467e68a9",
        "torch._inductor.lowering._pad_as_cat": "8647724b1e4c3b18",
        "torch._inductor.utils.use_scatter_fallback": "0094793d6601fb21",
        "torch._prims_common.get_acc_type": "287503c61f613d28",
        "torch._decomp.decompositions.native_batch_norm_helper": "7a9313061278ce60",
        "torch._inductor.decomposition.decomp_native_layer_norm": "fb16928a15094d2f",
        # Registered over (_compile/cpu_choices.py): the function each spyre entry falls back to,
        # whose CPU branch it writes out.
        "torch._inductor.decomposition.mm": "f044043439f9f24b",
        "torch._inductor.decomposition.addmm": "546717afce24e8e7",
        "torch._inductor.decomposition.bmm": "2c254c0ded8eda9e",
        "decompositions[aten.native_group_norm.default]": "39fb60e3dda03ce9",
        "lowerings[aten.bmm.default]": "1a082048485e2aee",
        "lowerings[aten.convolution.default]": "5ed043f821a49812",
        "lowerings[aten.cat.default]": "8dfd43fbf4ed0c26",
        # The registration spyre's backend uses (_compile/inductor.py).
        "torch._inductor.codegen.common.register_backend_for_device": "06b0018337d312c4",
    },
    GRAPHS: {
        "torch._inductor.cudagraph_utils.check_multiple_devices_or_any_cpu_nodes": "8c19bb03d41cdde0",
        "torch._inductor.cudagraph_utils.CUDAGraphPolicy": "5b53bc65c689d7c4",
    },
    INTERFACE: {
        "torch._dynamo.device_interface.register_interface_for_device": "b7df3d48cbab4741",
    },
    # The aliases act on Python's import system, not on torch code: what they assume of torch
    # is checked by what it did (PREMISES), not by a hash.
    ALIASES: {},
    HOST_READS: {
        "torch.Tensor.numpy": "1a335b6ff4b8b3be",
        "torch.Tensor.tolist": "df50a5daa8360128",
    },
    PROFILER_EXIT: {
        "torch.autograd.profiler.profile.__exit__": "e6ae36adb109f87c",
    },
    LAYOUTS: {
        "torch._C.TensorBase.to": "50b3cd3ca5033c23",
        "torch.empty": "5f6f770dec3a0dc2",
        "torch.zeros": "c25451fb512a4f77",
        "torch.ones": "86b23ac70885b1ce",
        "torch.full": "b91605f4f9293f96",
    },
    LAYOUT_GUARD: {
        "torch._dynamo.guards.GuardBuilder.TENSOR_MATCH": "ff3dd00a6e50ab44",
    },
    PRINTING: {
        # Replaced.
        "torch._tensor_str._tensor_str": "585d355095d3247f",
        # Relied on: it takes the suffixes (device, dtype, grad_fn) from the tensor it was
        # given and calls _tensor_str by name for the contents.
        "torch._tensor_str._str_intern": "83e262eee6e387d4",
    },
}


def _device_module_is_registered_as_torch_spyre():
    return sys.modules.get("torch.spyre") is sys.modules.get("torch_spyre")


# What a feature assumes of torch's behaviour, checked as it applies: name -> predicate.
PREMISES = {
    ALIASES: {
        "torch._register_device_module registered torch_spyre as sys.modules['torch.spyre']":
            _device_module_is_registered_as_torch_spyre,
    },
}

class _Text(str):
    """A target that is a fact about torch's source rather than one object: its text is
    hashed."""


def _modules_naming(name, package):
    """The modules of `package` whose source names `name` unqualified (the module that
    defines it and those importing it by name), one dotted name a line, sorted."""
    root = os.path.dirname(importlib.util.find_spec(package).origin)
    pattern = re.compile(rf"(?<![.\w]){re.escape(name)}\b")
    found = []
    for folder, _, files in os.walk(root):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = os.path.join(folder, file)
            with open(path, encoding="utf-8") as f:
                if not pattern.search(f.read()):
                    continue
            module = os.path.relpath(path, root)[:-len(".py")].replace(os.sep, ".")
            found.append(package if module == "__init__" else
                         f"{package}.{module.removesuffix('.__init__')}")
    return _Text("\n".join(sorted(found)))


_RESOLVERS = {
    "modules of torch._inductor naming get_current_backend":
        lambda: _modules_naming("get_current_backend", "torch._inductor"),
    "decompositions[aten.native_group_norm.default]":
        _decomposition("aten.native_group_norm.default"),
    "lowerings[aten.bmm.default]": _lowering("aten.bmm.default"),
    "lowerings[aten.convolution.default]": _lowering("aten.convolution.default"),
    "lowerings[aten.cat.default]": _lowering("aten.cat.default"),
}


def fingerprint(obj):
    """The first 16 hex digits of the SHA-256 of obj's source (of its name for a builtin, of
    itself for a _Text)."""
    if isinstance(obj, _Text):
        text = str(obj)
    else:
        try:
            text = inspect.getsource(obj)
        except (TypeError, OSError):
            text = "builtin:" + getattr(obj, "__qualname__", repr(obj))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _resolve(name):
    return _RESOLVERS[name]() if name in _RESOLVERS else _attr(name)


def current_fingerprints(feature):
    """Each target's hash in this torch (None where the target is missing)."""
    result = {}
    for name in TARGETS[feature]:
        try:
            result[name] = fingerprint(_resolve(name))
        except (ImportError, AttributeError, KeyError):
            result[name] = None
    return result


_lock = threading.Lock()
_state = {}  # feature -> "enabled", or "disabled: <the targets that differ>"
_messages = {}  # feature -> the warning it was disabled with


def check(feature):
    """Whether `feature` may patch its targets: checked once; a mismatch warns once."""
    with _lock:
        if feature in _state:
            return _state[feature] == "enabled"
    differ = [name for name, found in current_fingerprints(feature).items()
              if found != TARGETS[feature][name]]
    differ += [name for name, holds in PREMISES.get(feature, {}).items() if not holds()]
    with _lock:
        if feature in _state:
            return _state[feature] == "enabled"
        if not differ:
            _state[feature] = "enabled"
            return True
        _state[feature] = "disabled: " + ", ".join(differ)
        _messages[feature] = disabled_message(feature, differ)
    warnings.warn(_messages[feature], RuntimeWarning, stacklevel=2)
    return False


def disabled_message(feature, differ):
    return (f"torch_spyre: {feature} is disabled: these torch internals it patches differ in "
            f"torch {torch.__version__} from torch {WRITTEN_AGAINST}, which torch_spyre was "
            f"written against: {', '.join(differ)}")


def report():
    """Each feature's state: "enabled", "disabled: <the targets that differ>" or "not checked
    yet" (its torch module has not loaded)."""
    with _lock:
        return {feature: _state.get(feature, "not checked yet") for feature in TARGETS}


def disabled_reason(feature):
    """The warning `feature` was disabled with, or None."""
    with _lock:
        return _messages.get(feature)


def print_fingerprints():
    """Each target's hash in the installed torch, as TARGETS records them (to record a new
    torch: `python -c "from torch_spyre import _patches; _patches.print_fingerprints()"`)."""
    # The targets as torch defines them: the import hooks still waiting would patch them as
    # they load, so they wait until the targets are read, then run for the modules that
    # loaded meanwhile (as when_imported does for a loaded module) or wait again.
    waiting = [f for f in sys.meta_path if isinstance(f, AfterImport)]
    for hook in waiting:
        sys.meta_path.remove(hook)
    try:
        print(f"torch {torch.__version__}")
        for feature in TARGETS:
            print(f"{feature}:")
            for name, found in current_fingerprints(feature).items():
                print(f"    {name!r}: {found!r},")
    finally:
        for hook in reversed(waiting):
            if hook.name in sys.modules:
                hook.callback(sys.modules[hook.name])
            else:
                sys.meta_path.insert(0, hook)
