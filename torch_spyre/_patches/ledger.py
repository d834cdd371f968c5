"""Every replacement of a torch internal that torch_spyre makes, in one place, each checked
(docs/compile.md, "Patched torch internals").

torch_spyre registers itself through torch's extension points where torch offers one (the
PrivateUse1 device module, inductor's register_backend_for_device with a device_custom_pass,
register_device_op_overrides, register_lowering, dynamo's register_interface_for_device,
config.cudagraph_policy). What torch 2.13 offers no extension point for is replaced here, and
nowhere else in the package. Each patch below says why it exists, what it changes and which
upstream API would retire it.

Every patch belongs to one feature and names its targets: the torch functions it replaces or
whose behaviour it reproduces (or, for the import finder that acts on Python's import system,
the premise it relies on: PREMISES). Before a feature's patches are applied (at `import torch` for
the aliases and the sanitizer's host reads; when inductor's compile_fx module is imported for
torch.compile, before anything is compiled; when cudagraph_utils is imported for
reduce-overhead), each target's source is hashed and compared with the hash recorded for the
torch this code was written against (WRITTEN_AGAINST). On a mismatch the feature is disabled
with one warning naming the torch version and the feature, and nothing of it is patched:
torch.compile on spyre then raises, reduce-overhead on spyre runs without graphs (inductor's
own skip), and so on (`report()` lists each feature's state). Patches are applied once, for
every thread alike, and never changed afterwards. Inductor's are applied as its compile_fx
module finishes loading: every inductor compile imports it first, and Python's import lock
holds any other thread importing it until the hook has run, so no compile sees a half-patched
torch and no torch module global changes while one runs (what depends on the lowering in
progress is thread-local state the patch reads).

`print_fingerprints()` prints the targets' hashes in the installed torch (to record a new one).
"""

import contextlib
import functools
import hashlib
import importlib
import importlib.abc
import importlib.util
import inspect
import os
import re
import sys
import threading
import warnings

import torch

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
        # Where it is replaced: every module naming it (_MODULES_USING_GET_CURRENT_BACKEND),
        # so a module that starts importing it by name disables the feature.
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
        # Registered over (cpu_choices.py): the function each spyre entry falls back to,
        # whose CPU branch it writes out.
        "torch._inductor.decomposition.mm": "f044043439f9f24b",
        "torch._inductor.decomposition.addmm": "546717afce24e8e7",
        "torch._inductor.decomposition.bmm": "2c254c0ded8eda9e",
        "decompositions[aten.native_group_norm.default]": "39fb60e3dda03ce9",
        "lowerings[aten.bmm.default]": "1a082048485e2aee",
        "lowerings[aten.convolution.default]": "5ed043f821a49812",
        "lowerings[aten.cat.default]": "8dfd43fbf4ed0c26",
        # The registration spyre's backend uses (inductor.py).
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


# ---------------------------------------------------------------------------------------
# Import machinery (Python's, not torch's; the modules it acts on are torch's).


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
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
        sys.meta_path.insert(0, _AfterImport(name, callback))


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


# ---------------------------------------------------------------------------------------
# The stream sanitizer's host reads (sanitizer.py).

_HOST_READS = ("numpy", "tolist")


def _host_read(name):
    """Tensor.<name> reporting a read of a pending copy's host bytes."""
    from .. import _C

    original = getattr(torch._C.TensorBase, name)

    def read(self, *args, **kwargs):
        if _C._sanitizer_host_pending() and self.device.type == "cpu":
            _C._sanitizer_host_read(self, f"{name}()")
        return original(self, *args, **kwargs)

    read.__name__ = read.__qualname__ = name
    read.__doc__ = original.__doc__
    read._spyre_sanitizer = True
    return read


def wrap_host_reads():
    """Why: Tensor.numpy() and tolist() read a CPU tensor's memory without the dispatcher, so
    the sanitizer's CPU-side check (csrc/launch/sanitizer_host.cpp) never sees them.
    Changes: torch.Tensor.numpy / tolist, while the sanitizer is on (removed by
    unwrap_host_reads); each calls TensorBase's after the check.
    Retired by: a dispatcher op (or a hook) for the host reads numpy() and tolist() make."""
    if not check(HOST_READS):
        return
    for name in _HOST_READS:
        if name not in torch.Tensor.__dict__:  # not wrapped yet, nor overridden by someone else
            setattr(torch.Tensor, name, _host_read(name))


def unwrap_host_reads():
    for name in _HOST_READS:
        if getattr(torch.Tensor.__dict__.get(name), "_spyre_sanitizer", False):
            delattr(torch.Tensor, name)


# ---------------------------------------------------------------------------------------
# Device layouts (_device_layouts.py).

_LAYOUT_FACTORIES = ("empty", "zeros", "ones", "full")


def _with_device_layout(original, apply):
    """`original` taking one more keyword, device_layout=: without it (or with None) the call
    is original's; with it, apply(args, kwargs, layout)."""

    @functools.wraps(original)
    def call(*args, device_layout=None, **kwargs):
        if device_layout is None:
            return original(*args, **kwargs)
        return apply(args, kwargs, device_layout)

    call._torch_spyre_wraps = original
    return call


def wrap_device_layouts():
    """Why: upstream torch-spyre's API passes device_layout= to Tensor.to and to the factories,
    keywords torch's argument parsers refuse. Changes: torch.Tensor.to, torch.empty,
    torch.zeros, torch.ones, torch.full accept device_layout=; without it the call goes to
    torch's function unchanged. Retired by: a device-specific keyword in torch's factories (none
    is planned), or upstream moving its API off torch's names."""
    if not check(LAYOUTS):
        return
    from .. import _device_layouts

    if "to" not in torch.Tensor.__dict__:
        torch.Tensor.to = _with_device_layout(
            torch._C.TensorBase.to,
            lambda args, kwargs, layout: _device_layouts.to_with_layout(
                args[0], layout, args[1:], kwargs))
    for name in _LAYOUT_FACTORIES:
        if getattr(getattr(torch, name), "_torch_spyre_wraps", None) is None:
            wrapper = _with_device_layout(getattr(torch, name),
                                          functools.partial(_factory_with_layout, name))
            setattr(torch, name, wrapper)
            # TorchScript compiles torch.<name> as its aten op: its table of them, built at
            # its first use from torch's attributes, finds the wrapper there; one built
            # already is told.
            if torch.jit._builtins._builtin_table is not None:
                torch.jit._builtins._register_builtin(wrapper, "aten::" + name)


def _factory_with_layout(name, args, kwargs, layout):
    from .. import _device_layouts

    return _device_layouts.factory_with_layout(name, args, kwargs, layout)


def guard_device_layouts(guards):
    """Why: dynamo's TENSOR_MATCH guards sizes, strides, dtype and device, not the device
    layout, so a compiled graph traced for one layout would be reused for another. Changes:
    GuardBuilder.TENSOR_MATCH also installs, for a spyre tensor, a guard that its layout is the
    one seen at tracing (_device_layouts.guard_condition); the wrapper keeps TENSOR_MATCH's
    name and guard_check_spec. Retired by: a device hook for extra tensor guards in dynamo."""
    if not check(LAYOUT_GUARD):
        return
    from .. import _device_layouts

    builder = guards.GuardBuilder
    original = builder.TENSOR_MATCH
    if getattr(original, "_torch_spyre_wraps", None) is not None:
        return

    @functools.wraps(original)
    def TENSOR_MATCH(self, guard, value=None):
        original(self, guard, value)
        if guards.match_on_id_for_tensor(guard):
            return  # an ID_MATCH: the same tensor object
        tensor = value() if isinstance(value, torch.utils.weak.TensorWeakRef) else value
        tensor = tensor if tensor is not None else self.get(guard)
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "spyre":
            return
        self.get_guard_manager(guard).add_lambda_guard(
            _device_layouts.guard_condition(tensor),
            [f"device_tensor_layout({guard.name}) is the traced input's"], guard.user_stack)

    TENSOR_MATCH._torch_spyre_wraps = original
    builder.TENSOR_MATCH = TENSOR_MATCH


# Printing (repr, str, print of a spyre tensor; installed at import torch).


def print_from_host_copy():
    """torch._tensor_str._tensor_str, formatting a spyre tensor's copy on the host.

    Why: torch's formatter computes on the tensor's device: masked_select, abs, min, max, one
    ceil and one .item() per element (each a wait for the stream), and a cast to float64
    (tensor_totype) that a card cannot hold: under TORCH_SPYRE_CARD_RULES=1,
    print(torch.ones(2, device="spyre")) raised "spyre cannot allocate a tensor of dtype
    torch.float64". torch itself formats xla, lazy, ipu and mtia tensors from a CPU copy
    (_str_intern's device list). Changes: a spyre tensor's contents are formatted from one
    copy to the host, with CPU's formatter (spyre's values are CPU's, so the text is what
    the device would print); the device, dtype and grad_fn suffixes are still taken from
    the spyre tensor (_str_intern). Retired by: a device-module hook (or a device list torch
    lets a backend join) for formatting from a CPU copy.
    Returns whether the replacement is in place (False, with one warning, on another torch)."""
    from torch import _tensor_str

    if getattr(_tensor_str._tensor_str, "_torch_spyre_wraps", None) is not None:
        return True
    if not check(PRINTING):
        return False
    original = _tensor_str._tensor_str

    @functools.wraps(original)
    def _tensor_str_from_host(self, indent):
        if self.device.type == "spyre":
            self = self.to("cpu")
        return original(self, indent)

    _tensor_str_from_host._torch_spyre_wraps = original
    _tensor_str._tensor_str = _tensor_str_from_host
    return True


# ---------------------------------------------------------------------------------------
# The profiler's stop (_profiler_exit.py).


def wrap_profiler_exit(stopping):
    """torch.autograd.profiler.profile.__exit__, with the context variable `stopping` True
    while it runs.

    Why: that __exit__ calls the device module's synchronize() before it disables the
    profiler, so a device fault raised there would leave the profiler enabled and the trace
    unwritten; torch gives a device module no way to tell that call from the program's own
    (torch.spyre.synchronize() reads the flag: _profiler_exit.stopping()). Changes: nothing
    else: torch's __exit__ is called with the same arguments and its result returned.
    Retired by: a try/finally in that __exit__ (the profiler disabled even when the
    synchronize raises), or a device-module hook for that synchronize.
    Returns whether the wrapper is in place (False, with one warning, on another torch)."""
    profile = torch.autograd.profiler.profile
    if getattr(profile.__exit__, "_torch_spyre_wraps", None) is not None:
        return True
    if not check(PROFILER_EXIT):
        return False
    original = profile.__exit__

    @functools.wraps(original)
    def __exit__(self, exc_type, exc_val, exc_tb):
        token = stopping.set(True)
        try:
            return original(self, exc_type, exc_val, exc_tb)
        finally:
            stopping.reset(token)

    __exit__._torch_spyre_wraps = original
    profile.__exit__ = __exit__
    return True


# ---------------------------------------------------------------------------------------
# torch.compile on spyre: inductor (applied by _compile.inductor.install, checked first).

# What the lowering in progress on this thread asks of the patched checks below: set only
# around one spyre lowering call, read only on the thread that set it.
_lowering_scope = threading.local()


@contextlib.contextmanager
def _scoped(attribute, value):
    previous = getattr(_lowering_scope, attribute, None)
    setattr(_lowering_scope, attribute, value)
    try:
        yield
    finally:
        setattr(_lowering_scope, attribute, previous)


def devices_answer_cpu_for_spyre():
    """While active on this thread, ir.get_device_type answers "cpu" for spyre nodes (the
    convolution lowering's bias check: cpu_choices.py)."""
    return _scoped("spyre_as_cpu", True)


def _on_spyre(node):
    device = node.get_device() if hasattr(node, "get_device") else None
    return device is not None and device.type == "spyre"


# The modules that import get_current_backend by name (TARGETS checks that torch's are these).
_MODULES_USING_GET_CURRENT_BACKEND = (
    "torch._inductor.utils",
    "torch._inductor.codegen.common",
    "torch._inductor.scheduler",
    "torch._inductor.kernel.mm_common",
)


def apply_inductor_patches():
    """Every inductor patch; called once, after check(COMPILE) passed."""
    import sympy
    from torch._decomp import decompositions as torch_decompositions
    from torch._inductor import config, decomposition, ir, lowering, utils
    from torch._inductor.scheduler import BaseSchedulerNode, Scheduler
    from torch._inductor.virtualized import V, ops

    # get_current_backend, in each module that imported it by name.
    # Why: it picks dtype propagation and low-precision upcasting rules by backend; inductor
    # 2.13 answers "cpp" only for the device type "cpu", and spyre's kernels are the C++
    # backend's (Triton's rules give a KeyError in to_dtype for a bool reduction).
    # Changes: "cpp" for spyre; other devices as before.
    # Retired by: a backend name registered with register_backend_for_device (the scheduling
    # class naming its code generator) that get_current_backend consults.
    original_backend = utils.get_current_backend

    def get_current_backend(device_type=None):
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == "spyre" else original_backend(device_type)

    for name in _MODULES_USING_GET_CURRENT_BACKEND:
        module = importlib.import_module(name)
        if getattr(module, "get_current_backend", None) is original_backend:
            module.get_current_backend = get_current_backend

    # BaseSchedulerNode.is_cpu. Why: it skips loop reordering and reindexing the C++ code
    # generation does not support. Changes: true for spyre nodes too. Retired by: a
    # backend feature flag (BackendFeature) the scheduler asks instead of the device type.
    def is_cpu(node):
        device = node.get_device()
        return device is not None and device.type in ("cpu", "spyre")

    BaseSchedulerNode.is_cpu = is_cpu

    # Scheduler.codegen_extern_call. Why: the C++ backend queues a graph's kernel calls until
    # a flush; the scheduler flushes before extern calls on a device, not before device-less
    # ones (streams.synchronize_device, record_event), whose line would precede the kernels
    # scheduled before them. Changes: a flush first, for device-less extern calls in a spyre
    # graph. Retired by: the scheduler flushing before every extern call (upstream fix).
    codegen_extern_call = Scheduler.codegen_extern_call

    def flush_then_codegen_extern_call(scheduler, node):
        current = scheduler.current_device
        if node.get_device() is None and current is not None and current.type == "spyre":
            scheduler.flush()
        codegen_extern_call(scheduler, node)

    Scheduler.codegen_extern_call = flush_then_codegen_extern_call

    # ir.is_cpu. Why: it picks CPU's thresholds for realizing (storing) an intermediate
    # rather than recomputing it (a stored bfloat16 intermediate is rounded). Changes: true
    # for spyre nodes. Retired by: thresholds per registered backend (device_custom_config).
    original_get_device_type = ir.get_device_type

    def ir_is_cpu(x):
        return original_get_device_type(x) in ("cpu", "spyre")

    ir.is_cpu = ir_is_cpu

    # ir.get_device_type. Why: the convolution lowering (kernel/conv.py) peels the bias off
    # for every device type but "cpu", reading ir.get_device_type(x) once; spyre's
    # registered convolution lowering (cpu_choices.py) asks for CPU's answer there.
    # Changes: "cpu" for a spyre node, only on the thread inside that lowering call
    # (devices_answer_cpu_for_spyre); otherwise torch's answer. Retired by: a per-backend
    # choice of keeping the bias in the convolution.
    def get_device_type(x):
        device_type = original_get_device_type(x)
        if device_type == "spyre" and getattr(_lowering_scope, "spyre_as_cpu", False):
            return "cpu"
        return device_type

    ir.get_device_type = get_device_type

    # lowering.use_two_step_variance. Why: two passes (mean, then squares about it) rather
    # than Welford for small reductions: CPU's threshold is
    # config.cpp.use_two_step_variance_threshold, other devices'
    # config.unroll_reductions_threshold. Changes: for spyre, torch's CPU branch (written
    # out: CPU's threshold, no minimum size, no split check). Retired by: the threshold per
    # registered backend.
    original_two_step = lowering.use_two_step_variance

    def use_two_step_variance(x, axis, keepdim, input_dtype):
        if not _on_spyre(x):
            return original_two_step(x, axis, keepdim, input_dtype)
        axis = lowering._validate_reduction_axis(x, axis)
        kwargs = lowering._make_reduction_inner(x, axis=axis, keepdims=keepdim, dtype=None,
                                                override_return_dtype=None)
        reduction_numel = utils.sympy_product(kwargs["reduction_ranges"])
        if not isinstance(reduction_numel, sympy.Integer):
            return False
        return (int(reduction_numel) <= config.cpp.use_two_step_variance_threshold
                and utils.sympy_product(kwargs["ranges"]) != 1)

    lowering.use_two_step_variance = use_two_step_variance

    # lowering.div_prim, and prims.div's lowering. Why: other devices multiply by a
    # constant's reciprocal, CPU divides (pytorch/pytorch#157959: the reciprocal is not
    # exact). Changes: division for spyre. div_prim is called by name from div and the
    # pooling lowerings; prims.div is registered again with it (register_lowering; the
    # overload too: registering a packet skips overloads already registered).
    # Retired by: the choice per registered backend.
    original_div = lowering.div_prim

    def div_prim(a, b):
        integral = all(lowering.is_boolean_type(v) or lowering.is_integer_type(v) for v in (a, b))
        if not integral and _on_spyre(a) and lowering.get_constant_value(b) is not None:
            return lowering.make_pointwise(lambda *args: ops.truediv(*args))(a, b)
        return original_div(a, b)

    lowering.div_prim = div_prim
    prims_div = lowering.prims.div
    lowering.register_lowering([prims_div, prims_div.default], broadcast=True)(div_prim)

    # lowering._make_reduction_inner and ir.is_triton as lowering sees it. Why: an
    # argmax/argmin over several dims of a permuted or non-contiguous tensor must compute
    # logical indices; inductor does so for Triton and for "cpu" with the C++ backend only,
    # so spyre got storage offsets (x.t().argmax() gave 25 for 5). Changes: for a spyre
    # argmax/argmin, is_triton (the name that check consults) answers True for spyre nodes
    # on this thread during that call; otherwise torch's answer. Retired by: the check
    # asking the registered backend (BackendFeature) instead of the device type.
    original_reduction_inner = lowering._make_reduction_inner
    original_is_triton = lowering.is_triton

    def is_triton(node):
        if getattr(_lowering_scope, "spyre_argreduce", False) and _on_spyre(node):
            return True
        return original_is_triton(node)

    def make_reduction_inner(x, **kwargs):
        if _on_spyre(x) and str(kwargs.get("reduction_type")).startswith(("argmax", "argmin")):
            with _scoped("spyre_argreduce", True):
                return original_reduction_inner(x, **kwargs)
        return original_reduction_inner(x, **kwargs)

    lowering.is_triton = is_triton
    lowering._make_reduction_inner = make_reduction_inner

    # torch._prims_common.get_acc_type (at::toAccumulateType), used by the arange
    # decomposition. Why: CPU accumulates float32 in float64; spyre's eager kernels are
    # CPU's. Changes: CPU's accumulation type for spyre. Retired by: the accumulation type
    # per device (a device-module query).
    original_acc = torch._prims_common.get_acc_type

    def get_acc_type(dtype, device):
        if torch.device(device).type == "spyre":
            return original_acc(dtype, torch.device("cpu"))
        return original_acc(dtype, device)

    torch._prims_common.get_acc_type = get_acc_type

    # lowering._pad_as_cat. Why: CPU never rewrites a right pad as a cat with a filled
    # tensor (its cat would add kernels). Changes: never for spyre either (same values,
    # CPU's kernels). Retired by: the choice per registered backend.
    pad_as_cat = lowering._pad_as_cat

    def _pad_as_cat(x, padding, fill_value):
        return None if _on_spyre(x) else pad_as_cat(x, padding, fill_value)

    lowering._pad_as_cat = _pad_as_cat

    # utils.use_scatter_fallback, imported by name in lowering and decomposition. Why: CPU
    # falls back to ATen's scatter_reduce_ for a "sum" with several threads
    # (config.cpp.fallback_scatter_reduce_sum), where a generated kernel would add
    # atomically in thread order. Changes: spyre's source device answers as CPU's.
    # Retired by: the choice per registered backend.
    original_scatter = utils.use_scatter_fallback

    def use_scatter_fallback(op_overload, reduction_type, self_dtype, src_dtype,
                             src_device_type, src_is_tensor):
        if src_device_type == "spyre":
            src_device_type = "cpu"
        return original_scatter(op_overload, reduction_type, self_dtype, src_dtype,
                                src_device_type, src_is_tensor)

    lowering.use_scatter_fallback = use_scatter_fallback
    decomposition.use_scatter_fallback = use_scatter_fallback

    # torch._decomp.decompositions.native_batch_norm_helper (every batch_norm decomposition
    # calls it by name). Why: in eval mode CPU saves empty statistics, other devices the
    # running ones; CPU saves them in the input's dtype; spyre's eager batch_norm is CPU's.
    # Changes: CPU's saved statistics for spyre inputs. Retired by: the decomposition
    # following the eager kernel's per-device contract (a device query).
    original_batch_norm = torch_decompositions.native_batch_norm_helper

    def native_batch_norm_helper(input, weight, bias, running_mean, running_var, training,
                                 momentum, eps, functional):
        output, save_mean, save_rstd, *running = original_batch_norm(
            input, weight, bias, running_mean, running_var, training, momentum, eps, functional)
        if input.device.type == "spyre":
            if not training:
                save_mean, save_rstd = input.new_zeros((0,)), input.new_zeros((0,))
            save_mean, save_rstd = save_mean.to(dtype=input.dtype), save_rstd.to(dtype=input.dtype)
        return (output, save_mean, save_rstd, *running)

    torch_decompositions.native_batch_norm_helper = native_batch_norm_helper

    # decomposition.decomp_native_layer_norm (torch._refs.native_layer_norm). Why: CPU
    # returns mean and rstd in the input's dtype, other devices in the computation dtype.
    # Changes: the input's dtype for spyre. Retired by: as batch_norm's.
    original_layer_norm = decomposition.decomp_native_layer_norm

    def native_layer_norm(input, normalized_shape, weight, bias, eps):
        out, mean, rstd = original_layer_norm(input, normalized_shape, weight, bias, eps)
        if input.device.type == "spyre":
            mean, rstd = mean.to(dtype=input.dtype), rstd.to(dtype=input.dtype)
        return out, mean, rstd

    decomposition.decomp_native_layer_norm = native_layer_norm


# ---------------------------------------------------------------------------------------
# reduce-overhead (graphs.py).


def apply_graph_device_check(cudagraph_utils, spyre_policy_active):
    """cudagraph_utils.check_multiple_devices_or_any_cpu_nodes.

    Why: inductor 2.13 gives every device but CUDA a reason to skip graphs; spyre's graph
    policy (config.cudagraph_policy, graphs.py) wraps spyre graphs, but inductor asks this
    check first. Changes: while `spyre_policy_active()` (a policy of the user's may replace
    spyre's after it is installed: then its CUDA graph trees must never see a spyre graph),
    no reason for a graph whose only device is spyre, and a graph with CPU nodes beside
    spyre ones names its CPU node as inductor does without partitions; every other graph
    as before. Retired by: the check asking the registered graph policy (or the device
    interface) whether a device supports graphs."""
    check_devices = cudagraph_utils.check_multiple_devices_or_any_cpu_nodes

    def check_multiple_devices_or_any_cpu_nodes(device_node_mapping):
        devices = {d for d in device_node_mapping if d.type != "meta"}
        if not (any(d.type == "spyre" for d in devices) and spyre_policy_active()):
            return check_devices(device_node_mapping)
        if len(devices) == 1:
            return None
        cpu_node = device_node_mapping.get(torch.device("cpu"))
        if cpu_node is not None:
            message = cudagraph_utils.format_default_skip_message(
                f"cpu device ({cpu_node.name})")
            if stack_trace := cudagraph_utils._get_use_stack_trace(cpu_node):
                message = f"{message}. Found from : \n {stack_trace}"
            return message
        return check_devices(device_node_mapping)

    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_multiple_devices_or_any_cpu_nodes


def print_fingerprints():
    """Each target's hash in the installed torch, as TARGETS records them (to record a new
    torch: `python -c "from torch_spyre import _patches; _patches.print_fingerprints()"`)."""
    # The targets as torch defines them: the import hooks still waiting would patch them as
    # they load, so they wait until the targets are read, then run for the modules that
    # loaded meanwhile (as when_imported does for a loaded module) or wait again.
    waiting = [f for f in sys.meta_path if isinstance(f, _AfterImport)]
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
