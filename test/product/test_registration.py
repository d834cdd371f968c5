"""Issue 2: `import torch` alone gives a working, lazily started spyre device."""

import textwrap

import pytest
import torch

from conftest import run_python


def test_import_torch_registers_spyre_silently():
    proc = run_python(
        """
        import torch
        assert torch._C._get_privateuse1_backend_name() == "spyre"
        assert torch.accelerator.current_accelerator().type == "spyre"
        assert torch.spyre.__name__ == "torch_spyre"
        assert not torch.spyre.is_initialized()
        assert hasattr(torch.Tensor, "spyre") and hasattr(torch.Tensor, "is_spyre")
        """
    )
    assert proc.stdout == ""
    assert proc.stderr == ""


def test_direct_and_repeated_import_is_safe():
    run_python(
        """
        import torch_spyre, torch_spyre as again, importlib
        import torch
        importlib.import_module("torch_spyre")
        torch_spyre._register()
        torch_spyre._autoload()
        assert torch.spyre is torch_spyre
        assert not torch_spyre.is_initialized()
        """
    )


def test_import_without_autoload_registers_on_package_import():
    run_python(
        """
        import torch
        assert torch._C._get_privateuse1_backend_name() == "privateuseone"
        import torch_spyre
        assert torch._C._get_privateuse1_backend_name() == "spyre"
        assert torch.accelerator.current_accelerator().type == "spyre"
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )


def test_entry_point_is_declared():
    from importlib.metadata import entry_points

    (ep,) = [ep for ep in entry_points(group="torch.backends") if ep.name == "torch_spyre"]
    assert ep.value == "torch_spyre:_autoload"


@pytest.mark.parametrize(
    "first_use",
    [
        "torch.empty(4, device='spyre')",
        "torch.spyre.Stream()",
        "torch.Stream(device='spyre')",
        "torch.spyre.synchronize()",
        "torch.spyre._sleep(1)",
        "torch.accelerator.current_stream()",
    ],
)
def test_first_device_use_starts_runtime_once(first_use):
    run_python(
        f"""
        import torch
        assert not torch.spyre.is_initialized()
        torch.manual_seed(0)            # seeding does not need the runtime
        assert torch.spyre.device_count() == 8  # every card; the process still binds one
        assert not torch.spyre.is_initialized()
        {first_use}
        assert torch.spyre.is_initialized()
        torch.spyre._lazy_init(); torch.spyre.init()   # idempotent
        assert torch.spyre._C._bound_device() == 0
        """
    )


def test_lazy_init_is_thread_safe():
    run_python(
        """
        import threading, torch
        errors = []
        def use():
            try:
                torch.spyre._lazy_init()
                torch.spyre.Stream().synchronize()
            except Exception as e:
                errors.append(e)
        threads = [threading.Thread(target=use) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        assert errors == [], errors
        assert torch.spyre.is_initialized()
        """
    )


# Which devices are visible, and which one binds: test_device_enum.py.


def test_set_device_validates_before_and_after_init():
    proc = run_python(
        """
        import torch
        for bad in (8, 100):
            for call in (torch.spyre.set_device, torch.accelerator.set_device_index):
                try:
                    call(bad)
                except RuntimeError as e:
                    print(e)
                else:
                    raise SystemExit(f"set_device({bad}) did not raise")
            if bad == 8:
                torch.empty(1, device="spyre")   # start the runtime, then again
        try:
            torch.spyre.set_device(-1)
        except ValueError as e:
            print(e)
        # A visible device can be made current; only using it is refused.
        torch.spyre.set_device(7)
        print(torch.spyre.current_device())
        torch.spyre.set_device(0)
        print(torch.spyre.current_device(), torch.spyre._C._bound_device())
        """
    )
    out_of_range = (
        "Invalid device index {}: out of range for 8 visible Spyre device(s) "
        "(expected an index in [0, 8))"
    )
    assert proc.stdout.splitlines() == [
        out_of_range.format(8), out_of_range.format(8),
        out_of_range.format(100), out_of_range.format(100),
        "Invalid device index -1: set_device needs an index in [0, 8)",
        "7",
        "0 0",
    ]


def test_set_device_before_init_chooses_the_bound_device():
    run_python(
        """
        import torch
        torch.spyre.set_device("spyre:2")
        assert torch.spyre.current_device() == 2
        t = torch.ones(3, device="spyre")
        assert t.device == torch.device("spyre:2"), t.device
        assert torch.spyre._C._bound_device() == 2
        """,
        env={"AIU_WORLD_SIZE": "4"},
    )


def test_fork_after_init_is_refused_in_the_child():
    run_python(
        """
        import os, torch
        torch.spyre.init()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                torch.empty(2, device="spyre")
            except RuntimeError as e:
                msg = str(e)
                if "Cannot re-initialize Spyre in forked subprocess" in msg and "'spawn'" in msg:
                    code = 0
            try:
                torch.spyre.Stream()
                code = 1
            except RuntimeError as e:
                code = code if "forked subprocess" in str(e) else 1
            code = code if torch.spyre._is_in_bad_fork() else 1
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert torch.empty(2, device="spyre").device.type == "spyre"   # the parent is fine
        """
    )


def test_fork_before_init_is_allowed():
    run_python(
        """
        import os, torch
        pid = os.fork()
        if pid == 0:
            t = torch.ones(2, device="spyre")
            os._exit(0 if t.cpu().sum().item() == 2 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        """
    )


def test_common_device_type_instantiates_spyre():
    proc = run_python(
        """
        import sys, unittest, torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        class TestBasics(TestCase):
            def test_ones(self, device):
                self.assertEqual(torch.ones(3, device=device).cpu(), torch.ones(3))
            def test_add(self, device):
                a = torch.arange(4, device=device)
                self.assertEqual((a + a).cpu(), torch.arange(4) * 2)

        instantiate_device_type_tests(TestBasics, globals(), only_for="privateuse1")
        names = sorted(n for n in globals() if n.startswith("TestBasics"))
        print(names)
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(globals()[names[0]])
        result = unittest.TextTestRunner(stream=sys.stdout, verbosity=0).run(suite)
        print(result.testsRun, len(result.failures), len(result.errors))
        """
    )
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "['TestBasicsPRIVATEUSE1']"
    assert lines[-1] == "2 0 0"


def test_amp_and_module_surface():
    assert torch.spyre.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    for name in ("is_available", "device_count", "current_device", "set_device",
                 "is_initialized", "init", "_lazy_init", "_is_in_bad_fork", "synchronize",
                 "manual_seed", "manual_seed_all", "seed", "initial_seed",
                 "get_rng_state", "set_rng_state"):
        assert callable(getattr(torch.spyre, name)), name


# The thread mode key (csrc/launch/thread_mode.h): a dispatch key spyre borrows, registered at
# import only when no other library registered on it.
KEY = "TESTING_ONLY_GenericMode"
KEY_LEFT = ("which spyre borrows as its thread mode key; spyre leaves the key alone: metadata "
            "inference uses torch's (Python) Meta kernels and the stream sanitizer does not check "
            "the host side of copies")
# After a pending non_blocking D2H under the sanitizer: whether the thread carries the key, and
# spyre's results (sin, matmul and sum go through metadata inference).
KEY_USE = f"""
    from torch_spyre import sanitizer
    torch.spyre.synchronize()
    sanitizer.enable()
    h = torch.full((8,), 2.0, device="spyre").to("cpu", non_blocking=True)
    assert h.is_pinned()
    print("{KEY}" in repr(torch._C._dispatch_tls_local_include_set()))
    torch.spyre.synchronize()
    sanitizer.disable()
    x = torch.arange(6.0).reshape(2, 3)
    y = (x.to("spyre").sin() @ x.to("spyre").T).sum(0).cpu()
    assert torch.equal(y, (x.sin() @ x.T).sum(0)), (y, (x.sin() @ x.T).sum(0))
"""


def test_thread_mode_key_is_spyres():
    proc = run_python(
        f"""
        import warnings
        warnings.simplefilter("error")
        import torch, torch_spyre
        assert torch_spyre._C._thread_mode_key_owned()
        {textwrap.indent(textwrap.dedent(KEY_USE), " " * 8).strip()}
        """
    )
    assert proc.stdout == "True\n"


@pytest.mark.parametrize("registration", ["kernel", "fallback"])
def test_thread_mode_key_registered_by_another_library_is_left_alone(registration):
    # Registered before torch_spyre's import (no autoload): the import warns once, names the key
    # and the other registration, and spyre neither includes the key nor misses a result.
    register = {
        "kernel": f'lib = torch.library.Library("aten", "IMPL"); lib.impl("sin", lambda x: x, "{KEY}")',
        "fallback": f'lib = torch.library.Library("_", "IMPL"); lib.fallback(lambda *a: None, "{KEY}")',
    }[registration]
    proc = run_python(
        f"""
        import warnings
        import torch
        {register}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch_spyre
        spyre = [str(w.message) for w in caught if str(w.message).startswith("spyre: another")]
        assert [w.category for w in caught if str(w.message) in spyre] == [RuntimeWarning]
        print(spyre[0])
        dump = torch._C._dispatch_dump("aten::sin").splitlines()
        print([line.split(" ")[3] for line in dump if line.startswith("{KEY}:")])
        assert not torch_spyre._C._thread_mode_key_owned()
        {textwrap.indent(textwrap.dedent(KEY_USE), " " * 8).strip()}
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    message, registrant, included = proc.stdout.splitlines()
    if registration == "kernel":
        (where,) = eval(registrant)  # the kernel's "registered at <string>:N"
        assert message == (f"spyre: another library registered a kernel for aten::sin on dispatch "
                           f"key {KEY} (registered at {where}), {KEY_LEFT}")
    else:
        assert registrant == "[]"
        assert message == f"spyre: another library registered a fallback for dispatch key {KEY}, {KEY_LEFT}"
    assert included == "False"
