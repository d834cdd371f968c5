"""Issue 31, items 8 and 9: a failed runtime start, the profiler hook that
waits for the device, and the allocator's free() when memory is short.

Each test runs in a fresh interpreter: they start the runtime differently,
inject faults or replace operator new.
"""

import subprocess
import sysconfig
import textwrap

import pytest

from _helpers import WAIT_UNTIL
from conftest import run_python

BAD_HOST_COMPUTE = (
    "TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS='9' is not a valid number of host-compute streams "
    "(expected an integer from 1 to 8; unset, the default is 4)"
)


def test_a_failed_start_leaves_the_process_unstarted_and_a_corrected_retry_starts():
    proc = run_python(
        """
        import os, torch
        from torch_spyre import _C
        for attempt in range(2):
            try:
                torch.spyre.init()
            except RuntimeError as e:
                print("raised:", e)
            print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
                  _C._mapped_stream_count())
        try:
            torch.ones(2, device="spyre")
        except RuntimeError as e:
            print("tensor raised:", e)
        os.environ["TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS"] = "2"
        x = torch.ones(2, device="spyre") * 3
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
              _C._num_host_compute_streams(), x.cpu().tolist())
        print([torch.spyre.host_compute_stream().stream_id for _ in range(3)])
        """,
        env={"TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS": "9"},
    )
    assert proc.stdout.splitlines() == [
        f"raised: {BAD_HOST_COMPUTE}",
        "False NotInitialized 0",
        f"raised: {BAD_HOST_COMPUTE}",
        "False NotInitialized 0",
        f"tensor raised: {BAD_HOST_COMPUTE}",
        "True Ok 2 [3.0, 3.0]",
        "[65, 66, 65]",
    ]


def test_a_start_on_a_device_past_the_visible_ones_binds_nothing():
    proc = run_python(
        """
        import torch
        try:
            torch.spyre.init()
        except RuntimeError as e:
            print("raised:", e)
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name)
        torch.spyre.set_device(1)
        torch.spyre.init()
        print(torch.spyre.is_initialized(), torch.spyre.get_device_state().name,
              torch.spyre._C._bound_device())
        """,
        env={"LOCAL_RANK": "2", "FLEX_STUB_CARDS": "2"},
    )
    assert proc.stdout.splitlines() == [
        "raised: Invalid device index 2: out of range for 2 visible Spyre device(s) "
        "(expected an index in [0, 2))",
        "False NotInitialized",
        "True Ok 1",
    ]


def _build(tmp_path, name, source, *flags):
    src = tmp_path / f"{name}.cpp"
    src.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.so"
    subprocess.run(["c++", "-shared", "-fPIC", "-O1", "-std=c++17", str(src), "-o", str(out), *flags],
                   check=True, timeout=300)
    return out


@pytest.mark.slow  # compiles against torch's headers (about 50 s here)
def test_the_legacy_profiler_hook_waits_without_consuming_a_stream_failure(tmp_path):
    # torch calls ProfilerStubs::synchronize() from profiler code; a latched
    # failure must stay for the program's own next synchronize().
    import torch.utils.cpp_extension as ext

    includes = [f"-I{p}" for p in ext.include_paths()]
    torch_lib = ext.library_paths()[0]
    lib = _build(tmp_path, "stubs_sync", """
        #include <torch/csrc/profiler/stubs/base.h>
        extern "C" void stubs_synchronize() {
          torch::profiler::impl::privateuse1Stubs()->synchronize();
        }
        """, *includes, f"-I{sysconfig.get_paths()['include']}", f"-L{torch_lib}", "-ltorch_cpu",
        "-lc10", f"-Wl,-rpath,{torch_lib}")
    proc = run_python(WAIT_UNTIL + textwrap.dedent(f"""
        import ctypes, torch
        from torch_spyre.errors import SpyreStreamError
        from torch_spyre.testing import Gate, inject_fault
        stubs_synchronize = ctypes.CDLL({str(lib)!r}).stubs_synchronize
        x = torch.ones(1024, device="spyre")
        (x * 2).cpu()
        s = torch.spyre.current_stream()
        inject_fault(s, "fault 5")
        y = x * 2
        wait_until(lambda: torch.spyre.stream_get_error(s) != SpyreStreamError.Success,
                   what="the fault to latch")
        stubs_synchronize()  # the stream failed before: left pending
        # A stream that fails during the wait: its failure is not taken either.
        t = torch.spyre.Stream()
        gate = Gate()
        gate.block(t)
        # The fault is for the next operation t runs: the gate must be running first.
        wait_until(lambda: gate.blocked_streams == 1, what="the gate to hold t")
        inject_fault(t, "fault 6")
        with torch.spyre.stream(t):
            z = x * 3
        gate.release()
        stubs_synchronize()
        for stream in (s, t):
            try:
                stream.synchronize()
                print("no error")
            except RuntimeError as e:
                print("raised:", e)
    """))
    assert proc.stdout.splitlines() == ["raised: fault 5", "raised: fault 6"]


FAILING_NEW = """
    // operator new that throws std::bad_alloc on a thread while switched on.
    #include <cstdlib>
    #include <new>
    static thread_local int failing = 0;
    extern "C" void corners_fail_allocations(int on) { failing = on; }
    void* operator new(std::size_t n) {
      if (failing) throw std::bad_alloc();
      if (void* p = std::malloc(n ? n : 1)) return p;
      throw std::bad_alloc();
    }
    void* operator new[](std::size_t n) { return operator new(n); }
    void operator delete(void* p) noexcept { std::free(p); }
    void operator delete[](void* p) noexcept { std::free(p); }
    void operator delete(void* p, std::size_t) noexcept { std::free(p); }
    void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
"""


def test_free_survives_an_allocation_failure_and_the_block_returns_later(tmp_path):
    lib = _build(tmp_path, "failing_new", FAILING_NEW)
    proc = run_python("""
        import ctypes, torch
        from torch_spyre.testing import Gate
        fail = ctypes.CDLL(None).corners_fail_allocations
        stats = lambda: torch.spyre.memory_stats()
        s = torch.spyre.Stream()
        x = torch.ones(256, device="spyre")  # one 1024-byte block of the default stream
        x_ptr = x.data_ptr()
        s.wait_stream(torch.spyre.current_stream())
        gate = Gate()
        gate.block(s)
        with torch.spyre.stream(s):
            y = x * 2  # x's block is used on s, queued behind the gate
        before = stats()
        fail(1)
        del x  # free() needs an event on s: no memory for it
        fail(0)
        after = stats()
        print(before["allocated_bytes.all.current"] - after["allocated_bytes.all.current"],
              before["active_bytes.all.current"] - after["active_bytes.all.current"])
        gate.release()
        s.synchronize()
        # The next allocation records the deferred free's event on s; the block
        # returns to its pool once that event completes (at once, or by the
        # allocation after the synchronize), and is reused.
        z = torch.empty(256, device="spyre")
        torch.spyre.synchronize()
        w = torch.empty(256, device="spyre")
        print(x_ptr in (z.data_ptr(), w.data_ptr()), y.cpu().tolist() == [2.0] * 256,
              stats()["active_bytes.all.current"] - before["active_bytes.all.current"])
    """, env={"LD_PRELOAD": str(lib)})
    assert proc.stdout.splitlines() == ["1024 0", "True True 1024"]
