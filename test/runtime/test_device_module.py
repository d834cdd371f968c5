"""Issue 17: torch.spyre offers the torch.cuda module functions that make sense
for one device per process, each a thin delegate to torch.accelerator or _C."""

import types

import pytest
import torch

import torch_spyre
from conftest import run_python

# The package's own submodules: torch.cuda has memory/random/streams too.
SUBMODULES = {"distributed", "errors", "events", "graphs", "layouts", "memory", "profiler", "random",
              "sanitizer", "streams", "sync_debug", "testing"}


def test_dir_is_the_api_and_the_package_submodules():
    public = {name for name in dir(torch.spyre) if not name.startswith("_")}
    modules = {name for name in public if isinstance(getattr(torch.spyre, name), types.ModuleType)}
    assert modules <= SUBMODULES
    for name in modules:
        assert getattr(torch.spyre, name).__name__ == f"torch_spyre.{name}"
    assert public - modules == set(torch.spyre.__all__)
    assert len(torch.spyre.__all__) == len(set(torch.spyre.__all__))
    for name in ("sys", "torch"):
        assert not hasattr(torch.spyre, name), name


def test_dir_in_a_fresh_process_has_no_stray_module():
    proc = run_python(
        """
        import types, torch
        print(sorted(n for n in dir(torch.spyre) if not n.startswith("_")
                     and isinstance(getattr(torch.spyre, n), types.ModuleType)))
        """
    )
    assert proc.stdout.strip() == ("['errors', 'events', 'graphs', 'layouts', 'memory', 'random', "
                                   "'sanitizer', 'streams', 'sync_debug']")


CUDA_NAMES = [
    "current_device", "device", "device_count", "device_of", "empty_cache",
    "get_device_capability", "get_device_name", "get_device_properties", "get_rng_state",
    "get_rng_state_all", "init", "initial_seed", "is_available", "is_bf16_supported",
    "is_initialized", "manual_seed", "manual_seed_all", "max_memory_allocated",
    "max_memory_reserved", "mem_get_info", "memory_allocated", "memory_reserved",
    "memory_stats", "reset_accumulated_memory_stats", "reset_peak_memory_stats", "seed",
    "seed_all", "set_device", "set_rng_state", "set_rng_state_all", "synchronize",
    "Event", "Stream", "StreamContext", "current_stream", "default_stream", "set_stream",
    "stream", "host_memory_stats", "get_sync_debug_mode", "set_sync_debug_mode",
    "graph", "graph_pool_handle", "is_current_stream_capturing",
]


@pytest.mark.parametrize("name", CUDA_NAMES)
def test_torch_cuda_name_exists_on_spyre(name):
    assert name in torch.spyre.__all__
    assert hasattr(torch.cuda, name), name  # the name users know from torch.cuda
    assert callable(getattr(torch.spyre, name))


def test_device_context_manager_sets_and_restores_without_starting_the_runtime():
    proc = run_python(
        """
        import torch
        seen = []
        with torch.spyre.device(1):
            seen.append(torch.spyre.current_device())
            with torch.spyre.device("spyre:2"):
                seen.append(torch.spyre.current_device())
            seen.append(torch.spyre.current_device())
            with torch.spyre.device(None), torch.spyre.device(-1), torch.spyre.device("spyre"):
                seen.append(torch.spyre.current_device())
        seen.append(torch.spyre.current_device())
        print(seen, torch.spyre.is_initialized())
        with torch.spyre.device(torch.device("spyre:3")):
            t = torch.ones(2, device="spyre")  # the first use binds the process to spyre:3
        print(t.device, torch.spyre.current_device())
        # torch.accelerator.device_index starts the runtime on entry (torch's lazy init),
        # which binds the current device: here the runtime already runs on spyre:3.
        with torch.accelerator.device_index(3):
            u = torch.zeros(1, device="spyre")
            inner = torch.spyre.current_device()
        print(u.device, inner, torch.spyre.current_device())
        """,
        env={"AIU_WORLD_SIZE": "4"},
    )
    assert proc.stdout.splitlines() == ["[1, 2, 1, 1, 0] False", "spyre:3 0", "spyre:3 3 0"]


def test_device_context_manager_errors():
    with pytest.raises(RuntimeError, match=r"^Invalid device index 8: out of range for 8 visible "
                                           r"Spyre device\(s\) \(expected an index in \[0, 8\)\)"):
        with torch.spyre.device(8):
            pass
    assert torch.spyre.current_device() == 0
    with pytest.raises(ValueError, match=r"^expected a spyre device, got 'cpu'$"):
        torch.spyre.device("cpu")
    with pytest.raises(TypeError, match=r"^device must be an int, str, torch.device or None, "
                                        r"got 1.5 of type float$"):
        torch.spyre.device(1.5)


def test_device_of_follows_the_object():
    proc = run_python(
        """
        import torch
        with torch.spyre.device(1):
            t = torch.ones(2, device="spyre")
        with torch.spyre.device_of(t):
            a = torch.spyre.current_device()
        with torch.spyre.device_of(t.untyped_storage()):
            b = torch.spyre.current_device()
        with torch.spyre.device(1), torch.spyre.device_of(torch.ones(1)):
            c = torch.spyre.current_device()
        print(a, b, c, torch.spyre.current_device())
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.split() == ["1", "1", "1", "0"]


def test_memory_functions_delegate_to_torch_accelerator():
    proc = run_python(
        """
        import torch
        s = torch.spyre
        out = []
        x = torch.empty(256, device="spyre")   # 1024 bytes in a new 2 MiB small-pool segment
        y = torch.empty(1024, device="spyre")  # 4096 bytes, same segment
        for d in (None, 0, "spyre", "spyre:0", torch.device("spyre:0")):
            same_stats = s.memory_stats(d) == torch.accelerator.memory_stats()
            out.append((s.memory_allocated(d), s.max_memory_allocated(d), s.memory_reserved(d),
                        s.max_memory_reserved(d), same_stats))
        out.append(s.mem_get_info() == torch.accelerator.get_memory_info())
        out.append(s.mem_get_info())
        del x, y
        out.append((s.memory_allocated(), s.max_memory_allocated()))
        s.reset_peak_memory_stats("spyre")
        out.append((s.max_memory_allocated(), s.max_memory_reserved()))
        s.reset_accumulated_memory_stats(0)
        out.append(s.memory_stats()["allocated_bytes.all.allocated"])
        s.empty_cache()
        out.append((s.memory_reserved(), s.max_memory_reserved(), s.mem_get_info()))
        for line in out:
            print(line)
        """
    )
    seg = 2 << 20
    total = 16 << 30
    assert proc.stdout.splitlines() == [str((5120, 5120, seg, seg, True))] * 5 + [
        "True",
        str((total - seg, total)),
        "(0, 5120)",
        str((0, seg)),
        "0",
        str((0, seg, (total, total))),
    ]


def test_memory_stats_of_a_device_this_process_is_not_bound_to():
    proc = run_python(
        """
        import torch
        torch.ones(1, device="spyre")
        for call in (torch.spyre.memory_allocated, torch.spyre.mem_get_info):
            try:
                call(1)
            except RuntimeError as e:
                print(str(e).split(":")[0])
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.splitlines() == ["Only one Spyre device per process is supported"] * 2


def test_device_properties_follow_the_environment():
    proc = run_python(
        """
        import torch
        p = torch.spyre.get_device_properties()
        print(p.name, p.card_index, p.total_memory, p.engines, p.dma_engines)
        print(torch.spyre.get_device_name(), torch.spyre.get_device_name("spyre:0") == p.name)
        print(p)
        print(torch.spyre.mem_get_info())
        try:
            p.name = "x"
        except AttributeError as e:
            print(e)
        """,
        env={"FLEX_STUB_MEMORY_BYTES": str(64 << 20), "FLEX_STUB_ENGINES": "2",
             "FLEX_STUB_DMA_ENGINES": "3", "SPYRE_DEVICES": "5"},
    )
    assert proc.stdout.splitlines() == [
        "IBM Spyre (flex_stub emulation) 5 67108864 2 3",
        "IBM Spyre (flex_stub emulation) True",
        "_SpyreDeviceProperties(name='IBM Spyre (flex_stub emulation)', card_index=5, "
        "total_memory=64MB, engines=2, dma_engines=3)",
        "(67108864, 67108864)",
        "'_SpyreDeviceProperties' object attribute 'name' is read-only",
    ]


def test_device_properties_defaults():
    proc = run_python(
        """
        import torch
        p = torch.spyre.get_device_properties(0)
        print(p.total_memory, p.engines, p.dma_engines, p.card_index)
        print(p)
        """,
        env={"FLEX_STUB_DMA_ENGINES": "2"},
    )
    assert proc.stdout.splitlines() == [
        f"{16 << 30} None 2 0",
        "_SpyreDeviceProperties(name='IBM Spyre (flex_stub emulation)', card_index=0, "
        "total_memory=16384MB, engines=unlimited, dma_engines=2)",
    ]


def test_device_capability_is_torch_accelerator_s():
    capability = torch.spyre.get_device_capability()
    assert capability == torch.accelerator.get_device_capability()
    assert capability == torch.spyre.get_device_capability("spyre:0")
    dtypes = capability["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.float16, torch.int64} <= dtypes


def test_bf16_is_supported():
    assert torch.spyre.is_bf16_supported() is True
    assert torch.spyre.is_bf16_supported(including_emulation=False) is True


def test_rng_state_all_round_trips_every_device():
    proc = run_python(
        """
        import torch
        torch.manual_seed(7)
        states = torch.spyre.get_rng_state_all()
        print(len(states), all(s.dtype == torch.uint8 and s.device.type == "cpu" for s in states))
        a = torch.randn(4, device="spyre").cpu()
        torch.spyre.manual_seed_all(99)
        torch.spyre.set_rng_state_all(states)
        b = torch.randn(4, device="spyre").cpu()
        print(torch.equal(a, b), torch.equal(states[0], states[1]))
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.split() == ["2", "True", "True", "True"]


def test_default_generator_without_an_argument_is_the_current_devices():
    proc = run_python(
        """
        import torch
        C = torch.spyre._C
        torch.spyre.set_device(1)                   # seeding does not start the runtime
        g = C._get_default_generator()
        print(g.device, C._get_default_generator(-1).device)
        g.manual_seed(1234)
        print(C._get_default_generator(1).initial_seed(), C._get_default_generator(0).initial_seed() == 1234)
        torch.spyre.set_device(0)
        print(C._get_default_generator().device, torch.spyre.is_initialized())
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.split() == ["spyre:1", "spyre:1", "1234", "False", "spyre:0", "False"]
