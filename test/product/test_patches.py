"""torch_spyre/_patches/: every replaced torch internal is checked against the torch it was
written for, a mismatch disables the feature that depends on it (one warning, no wrong path),
and nothing of torch changes while a graph compiles (docs/compile.md, "Patched torch
internals")."""

import importlib
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python
from torch_spyre import _patches
from torch_spyre._patches import inductor_as_cpu, ledger

pytestmark = [
    pytest.mark.usefixtures("fresh_dynamo"),
    # The recorded hashes are torch 2.13.0's: on another torch the features are checked, not
    # these tests (docs/compatibility.md).
    pytest.mark.skipif(torch.__version__.split("+")[0] != _patches.WRITTEN_AGAINST,
                       reason=f"written for torch {_patches.WRITTEN_AGAINST}"),
]


def test_every_feature_is_enabled_on_the_torch_it_was_written_for():
    assert torch.__version__.split("+")[0] == _patches.WRITTEN_AGAINST
    torch.compile(lambda x: x + 1)(torch.ones(2, device="spyre"))
    # reduce-overhead's check runs as inductor's cudagraph_utils loads.
    importlib.import_module("torch._inductor.cudagraph_utils")

    states = _patches.report()
    assert states[_patches.COMPILE] == "enabled"
    assert states[_patches.GRAPHS] == "enabled"
    assert states[_patches.INTERFACE] == "enabled"
    assert states[_patches.ALIASES] == "enabled"
    assert states[_patches.LAYOUTS] == "enabled"
    assert states[_patches.LAYOUT_GUARD] == "enabled"
    assert states[_patches.PRINTING] == "enabled"


def test_the_modules_importing_get_current_backend_by_name_are_the_patched_ones():
    found = ledger._RESOLVERS["modules of torch._inductor naming get_current_backend"]()
    assert str(found).split("\n") == sorted(inductor_as_cpu._MODULES_USING_GET_CURRENT_BACKEND)



def test_inductors_cache_key_hashes_every_module_of_the_package(monkeypatch):
    # A graph compiled before a patch changed must not be reused: the backend's cache-key pass
    # hashes each module of torch_spyre/_patches/ with the code generation's sources.
    from torch_spyre._compile import cache_key

    hashed = []
    monkeypatch.setattr(cache_key, "get_hash_for_files",
                        lambda files: hashed.extend(files) or b"")
    cache_key.SpyreCodegenVersion().uuid()
    package = os.path.dirname(_patches.__file__)
    assert sorted(os.path.basename(f) for f in hashed if os.path.dirname(f) == package) == [
        "__init__.py", "after_import.py", "device_layout_guard.py", "device_layout_keyword.py",
        "graph_device_check.py", "host_copy_printing.py", "inductor_as_cpu.py", "ledger.py",
        "profiler_exit_flag.py", "sanitizer_host_reads.py", "submodule_aliases.py"]

# A torch where one more inductor module names get_current_backend: the set the fingerprint
# covers differs, so the patch (which replaces it module by module) would miss that module.
_ONE_MORE_MODULE = """
    import warnings
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch_spyre
        from torch_spyre import _patches
        from torch_spyre._patches import ledger
        listed = ledger._RESOLVERS["modules of torch._inductor naming get_current_backend"]
        ledger._RESOLVERS["modules of torch._inductor naming get_current_backend"] = (
            lambda: ledger._Text(listed() + "\\ntorch._inductor.codegen.new_backend"))
        import torch._inductor.compile_fx
    print([str(w.message) for w in caught if str(w.message).startswith("torch_spyre")])
    print(_patches.report()[_patches.COMPILE])
"""


def test_a_new_module_naming_get_current_backend_disables_compile_on_spyre():
    proc = run_python(_ONE_MORE_MODULE, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, timeout=240)
    target = "modules of torch._inductor naming get_current_backend"
    message = (f"torch_spyre: {_patches.COMPILE} is disabled: these torch internals it patches "
               f"differ in torch {torch.__version__} from torch 2.13.0, which torch_spyre was "
               f"written against: {target}")
    assert proc.stdout.splitlines() == [repr([message]), f"disabled: {target}"], proc.stderr


def test_print_fingerprints_keeps_the_pending_patches():
    proc = run_python("""
        import contextlib, io, sys
        import torch
        from torch_spyre import _patches
        from torch_spyre._patches.after_import import AfterImport
        pending = sorted(f.name for f in sys.meta_path if isinstance(f, AfterImport))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            _patches.print_fingerprints()
        lines = out.getvalue().splitlines()
        print("torch._inductor.compile_fx" in pending)
        print(lines[0], repr(lines[2]))
        # Those whose module the print loaded ran (cudagraph_utils: spyre's graph policy); the
        # others wait again.
        print(sorted(f.name for f in sys.meta_path if isinstance(f, AfterImport)))
        print(_patches.report()[_patches.GRAPHS])
        from torch._inductor import config
        print(config.cudagraph_policy is not None)
        print(torch.compile(lambda x: x * 2 + 1)(torch.arange(3.0, device="spyre")).cpu().tolist())
        print(_patches.report()[_patches.COMPILE])
    """, timeout=240)
    lines = proc.stdout.splitlines()
    assert lines[0] == "True"
    assert lines[1] == (f"torch {torch.__version__} "
                        "\"    'torch._inductor.utils.get_current_backend': '3e7a48839289d439',\"")
    # transformers' (torch_spyre/_trainer_device.py) waits for transformers.
    assert lines[2:] == ["['torch._inductor.compile_fx', 'transformers.training_args']", "enabled", "True", "[1.0, 3.0, 5.0]",
                         "enabled"]


# A different function in place of one target, before torch_spyre is imported: the check sees
# it as a torch whose internals differ.
_REPLACE_TWO_STEP_VARIANCE = """
    import warnings
    import torch
    import torch._inductor.lowering as lowering

    def use_two_step_variance(x, axis, keepdim, input_dtype):
        return False

    lowering.use_two_step_variance = use_two_step_variance
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch_spyre
        import torch._inductor.compile_fx  # inductor's backend registers as this loads
    for w in caught:
        if str(w.message).startswith("torch_spyre"):
            print(w.category.__name__, w.message)
    from torch_spyre import _patches
    print(_patches.report()[_patches.COMPILE])
    x = torch.arange(6.0, device="spyre")
    try:
        torch.compile(lambda x: x * 2 + 1)(x)
    except Exception as e:
        print(type(e).__name__, str(e).splitlines()[0])
    # Only spyre's inductor backend is off: CPU compiles, spyre runs eagerly and with aot_eager.
    print(torch.compile(lambda x: x * 2 + 1)(torch.arange(3.0)).tolist())
    print(torch.compile(lambda x: x * 2 + 1, backend="aot_eager")(x).cpu().tolist())
    print(lowering.use_two_step_variance is use_two_step_variance)
"""


def test_a_replaced_target_disables_compile_on_spyre_with_one_warning():
    proc = run_python(_REPLACE_TWO_STEP_VARIANCE, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                      timeout=240)
    version = torch.__version__
    message = (f"torch_spyre: torch.compile on spyre (inductor) is disabled: these torch "
               f"internals it patches differ in torch {version} from torch 2.13.0, which "
               f"torch_spyre was written against: torch._inductor.lowering.use_two_step_variance")
    assert proc.stdout.splitlines() == [
        f"RuntimeWarning {message}",
        "disabled: torch._inductor.lowering.use_two_step_variance",
        f"InductorError RuntimeError: {message}",
        "[1.0, 3.0, 5.0]",
        "[1.0, 3.0, 5.0, 7.0, 9.0, 11.0]",
        "True",
    ], proc.stdout + proc.stderr


_REPLACE_GRAPH_DEVICE_CHECK = """
    import warnings
    import torch
    import torch._inductor.cudagraph_utils as cudagraph_utils

    def check_multiple_devices_or_any_cpu_nodes(device_node_mapping):
        return None

    cudagraph_utils.check_multiple_devices_or_any_cpu_nodes = check_multiple_devices_or_any_cpu_nodes
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch_spyre
    print([str(w.message) for w in caught if str(w.message).startswith("torch_spyre")])
    from torch._inductor import config
    print(config.cudagraph_policy)
    # reduce-overhead on spyre compiles and runs, without spyre graphs.
    f = torch.compile(lambda x: x * 2 + 1, mode="reduce-overhead")
    x = torch.arange(4.0, device="spyre")
    print([f(x).cpu().tolist() for _ in range(3)])
    print(cudagraph_utils.check_multiple_devices_or_any_cpu_nodes
          is check_multiple_devices_or_any_cpu_nodes)
"""


def test_a_replaced_graph_check_disables_spyre_graphs_only():
    proc = run_python(_REPLACE_GRAPH_DEVICE_CHECK, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
                      timeout=240)
    message = ('torch_spyre: torch.compile(mode="reduce-overhead") spyre graphs is disabled: '
               f"these torch internals it patches differ in torch {torch.__version__} from torch "
               "2.13.0, which torch_spyre was written against: "
               "torch._inductor.cudagraph_utils.check_multiple_devices_or_any_cpu_nodes")
    assert proc.stdout.splitlines() == [
        repr([message]),
        "None",
        "[[1.0, 3.0, 5.0, 7.0], [1.0, 3.0, 5.0, 7.0], [1.0, 3.0, 5.0, 7.0]]",
        "True",
    ], proc.stdout + proc.stderr


# Where torch's code runs inside a spyre lowering that depends on a patch: the code objects
# whose calls the snapshot below is taken at (torch 2.13 file, function name).
_PROBED = {
    ("lowering.py", "_make_reduction_inner"),   # argmax over a transposed tensor
    ("inductor_as_cpu.py", "use_two_step_variance"),   # var (spyre's: torch's CPU branch)
    ("conv.py", "convolution"),                 # conv2d with a bias
    ("ir.py", "is_triton"),
    ("lowering.py", "div_prim"),                # division by a constant
}


def _patched_state():
    """What the patches change, by identity: each patched torch module's and class's
    attributes, inductor's lowerings and decomposition tables, and inductor's config."""
    from torch._inductor import config, decomposition, lowering
    from torch._inductor.scheduler import BaseSchedulerNode, Scheduler

    names = ("torch._inductor.ir", "torch._inductor.lowering", "torch._inductor.utils",
             "torch._inductor.decomposition", "torch._inductor.scheduler",
             "torch._inductor.codegen.common", "torch._inductor.kernel.mm_common",
             "torch._inductor.kernel.conv", "torch._inductor.kernel.bmm",
             "torch._inductor.cudagraph_utils", "torch._decomp.decompositions",
             "torch._prims_common", "torch")
    state = {name: {k: id(v) for k, v in vars(importlib.import_module(name)).items()}
             for name in names}
    state["BaseSchedulerNode"] = {k: id(v) for k, v in vars(BaseSchedulerNode).items()}
    state["Scheduler"] = {k: id(v) for k, v in vars(Scheduler).items()}
    state["torch.Tensor"] = {k: id(v) for k, v in vars(torch.Tensor).items()}
    state["lowerings"] = {k: id(v) for k, v in lowering.lowerings.items()}
    state["decompositions"] = {k: id(v) for k, v in decomposition.decompositions.items()}
    state["fast_random_decomps"] = {
        k: id(v) for k, v in decomposition.fast_random_decomps().items()}
    state["config"] = {}
    for key in config.get_config_copy():  # the live values ("cpp.threads": config.cpp.threads)
        value = config
        for part in key.split("."):
            value = getattr(value, part)
        primitive = isinstance(value, (bool, int, float, str, type(None)))
        state["config"][key] = value if primitive else id(value)
    return state


def _differences(outside, inside):
    # Entries torch adds while compiling (a fallback lowering made for a new op, a cache
    # filled) are not changes of what was there.
    return {(part, key) for part, entries in outside.items() for key, value in entries.items()
            if key in inside[part] and inside[part][key] != value}


def _spyre_program(x, img, weight, bias):
    return x.var(dim=1), x.t().argmax(), F.conv2d(img, weight, bias), x / 3


def test_nothing_patched_changes_while_a_graph_compiles():
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    inside = []

    class Snapshot(CustomGraphPass):
        def __call__(self, graph):
            inside.append(("post_grad_custom_post_pass", _patched_state()))

        def uuid(self):
            return None

    def probe(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if (code.co_filename.rsplit("/", 1)[-1], code.co_name) in _PROBED:
                inside.append((code.co_name, _patched_state()))

    args = (torch.randn(6, 5, device="spyre"), torch.randn(1, 2, 6, 6, device="spyre"),
            torch.randn(3, 2, 3, 3, device="spyre"), torch.randn(3, device="spyre"))
    torch.compile(lambda x: x + 1)(args[0])  # inductor loaded, spyre's patches applied
    # comprehensive_padding: torch's compile_fx sets it False for a graph without a GPU.
    with config.patch(post_grad_custom_post_pass=Snapshot(), force_disable_caches=True,
                      comprehensive_padding=False):
        outside = _patched_state()
        compiled = torch.compile(_spyre_program)
        sys.setprofile(probe)
        try:
            results = compiled(*args)
        finally:
            sys.setprofile(None)
    seen = {where for where, _ in inside}
    assert seen == {"post_grad_custom_post_pass", "_make_reduction_inner",
                    "use_two_step_variance", "convolution", "is_triton", "div_prim"}
    for where, state in inside:
        assert _differences(outside, state) == set(), where
    expected = _spyre_program(*(a.cpu() for a in args))
    assert results[1].item() == expected[1].item()
    torch.testing.assert_close([r.cpu() for r in results], list(expected))
