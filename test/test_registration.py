"""Issue 2: `import torch` alone gives a working, lazily started spyre device."""

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
        assert torch.spyre.device_count() == 1
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


# (environment, expected device_count); FLEX_STUB_CARDS defaults to 8.
ENUMERATION_CASES = [
    ({}, 1),
    ({"SPYRE_DEVICES": "0"}, 1),
    ({"SPYRE_DEVICES": "0,1"}, 2),
    ({"SPYRE_DEVICES": "0,1,1"}, 2),
    ({"SPYRE_DEVICES": "1,0"}, 2),
    ({"SPYRE_DEVICES": "0, 9"}, 1),
    ({"SPYRE_DEVICES": " 3 , 5 ,7"}, 3),
    ({"SPYRE_DEVICES": "0,1", "AIU_WORLD_SIZE": "5"}, 2),
    ({"AIU_WORLD_SIZE": "1"}, 1),
    ({"AIU_WORLD_SIZE": "3"}, 3),
    ({"AIU_WORLD_SIZE": "9"}, 8),
    ({"AIU_WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2"}, 3),
    ({"LOCAL_WORLD_SIZE": "2"}, 2),
    ({"LOCAL_WORLD_SIZE": "20"}, 8),
    ({"FLEX_STUB_CARDS": "2", "AIU_WORLD_SIZE": "4"}, 2),
    ({"FLEX_STUB_CARDS": "2", "SPYRE_DEVICES": "1,2,3"}, 1),
]


@pytest.mark.parametrize("env,expected", ENUMERATION_CASES)
def test_device_enumeration(env, expected):
    proc = run_python(
        """
        import torch
        print(torch.spyre.device_count(), torch.accelerator.device_count(),
              torch.spyre.is_available(), torch.spyre.is_initialized())
        """,
        env=env,
    )
    assert proc.stdout.split() == [str(expected), str(expected), "True", "False"]


@pytest.mark.parametrize(
    "env,message",
    [
        ({"AIU_WORLD_SIZE": "abc"}, "AIU_WORLD_SIZE='abc'"),
        ({"AIU_WORLD_SIZE": "0"}, "AIU_WORLD_SIZE"),
        ({"SPYRE_DEVICES": "0,x"}, "SPYRE_DEVICES"),
        ({"LOCAL_WORLD_SIZE": "2x"}, "LOCAL_WORLD_SIZE='2x'"),
        ({"FLEX_STUB_CARDS": "many"}, "FLEX_STUB_CARDS='many'"),
    ],
)
def test_malformed_enumeration_env_is_a_clear_error(env, message):
    proc = run_python(
        """
        import torch
        assert torch.spyre.is_available() is False
        try:
            torch.spyre.device_count()
        except RuntimeError as e:
            print(e)
        else:
            raise SystemExit("no error")
        """,
        env=env,
    )
    assert message in proc.stdout


def test_set_device_validates_before_and_after_init():
    run_python(
        """
        import torch
        for bad in (1, 5):
            for call in (torch.spyre.set_device, torch.accelerator.set_device_index):
                try:
                    call(bad)
                except RuntimeError as e:
                    msg = str(e)
                    assert "out of range" in msg and f"index {bad}" in msg and "1 visible" in msg, msg
                else:
                    raise SystemExit(f"set_device({bad}) did not raise")
            if bad == 1:
                torch.empty(1, device="spyre")   # start the runtime, then again
        try:
            torch.spyre.set_device(-1)
        except ValueError as e:
            assert "-1" in str(e)
        torch.spyre.set_device(0)
        assert torch.spyre.current_device() == 0
        """
    )


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
