"""Issue 8, clean exit: a process that ends with work still queued (a gate
never released, a long _sleep), with tensors alive, after free_runtime(), or
with non-main threads blocked on the device exits with code 0, quickly, and
prints nothing on stderr. docs/reliability.md, "Teardown order", explains why.

Each child prints time.monotonic() as its last act; CLOCK_MONOTONIC is system
wide, so the parent measures how long the exit itself took.
"""

import time

import pytest

from _helpers import WAIT_UNTIL
from conftest import run_python

# Exiting never waits for queued device work: 60 s of queued work must not
# delay it. The bound is generous for a loaded machine; a wait would be 60 s.
MAX_EXIT_SECONDS = 10.0

PRELUDE = """
import threading, time, torch
from torch_spyre import _C
from torch_spyre.testing import Gate

def wait_for_waiters(n):
    # Observable: n threads are inside a runtime wait (none can return to
    # Python before it completes, whatever the exit does).
    wait_until(lambda: _C._threads_in_host_waits() >= n, what=f"{n} threads in host waits")
""" + WAIT_UNTIL

EPILOGUE = """
print(time.monotonic(), flush=True)
"""

SCENARIOS = {
    "gate-never-released": """
        s = torch.spyre.Stream()
        x = torch.ones(1 << 16, device="spyre")
        s.wait_stream(torch.spyre.current_stream())
        gate = Gate()
        gate.block(s)
        gate.block(torch.spyre.default_stream())
        with s:
            y = x.clone()          # D2D behind the gate
            y.fill_(2)
        z = torch.zeros(8, device="spyre")   # queued on the gated default stream
        assert not s.query()
    """,
    "long-sleep": """
        s = torch.spyre.Stream(priority=-1)
        with s:
            torch.spyre._sleep(60_000)
        torch.spyre._sleep(60_000)
        assert not s.query()
    """,
    "tensors-alive-with-pending-frees": """
        s = torch.spyre.Stream()
        keep = [torch.full((256,), float(i), device="spyre") for i in range(32)]
        pinned = torch.ones(1 << 16).pin_memory()
        tmp = torch.ones(1 << 10, device="spyre")
        s.wait_stream(torch.spyre.current_stream())
        gate = Gate()
        gate.block(s)
        with s:
            dev = torch.empty(1 << 16, device="spyre")
            dev.copy_(pinned, non_blocking=True)       # queued H2D from pinned memory
            tmp.record_stream(s)
            del tmp                                     # a stream-ordered free, pending
            more = [t.clone() for t in keep]            # queued D2D copies
    """,
    "after-free-runtime": """
        s = torch.spyre.Stream()
        x = torch.ones(1024, device="spyre")
        with s:
            torch.spyre._sleep(60_000)
        torch.spyre._C.free_runtime()
        assert torch.spyre.get_device_state() is torch.spyre.SpyreDeviceState.NotInitialized
        with s:
            torch.spyre._sleep(1)      # a mapped stream keeps working after free
    """,
    "latched-fault-unreported": """
        from torch_spyre.testing import inject_fault
        s = torch.spyre.Stream()
        inject_fault(s, "never reported")
        with s:
            torch.spyre._sleep(1)
    """,
    "runtime-started-on-a-finished-thread": """
        box = []
        def start():
            s = torch.spyre.Stream()          # first device use: starts the runtime
            with s:
                box.append(torch.ones(4096, device="spyre"))
                torch.spyre._sleep(60_000)
        t = threading.Thread(target=start)
        t.start(); t.join()
        assert box[0].device.type == "spyre"
    """,
    "daemon-threads-blocked-in-waits": """
        # Each waits on a gated stream when the interpreter exits: the
        # runtime's shutdown wakes them after Python is finalized.
        streams = [torch.spyre.Stream() for _ in range(5)]
        gate = Gate()
        for s in streams:
            gate.block(s)
        x = torch.ones(4, device="spyre")
        streams[3].wait_stream(torch.spyre.current_stream())
        event = torch.Event(device="spyre")
        event.record(streams[2])
        def blocking_copy():
            with streams[3]:
                x.cpu()
        waits = [streams[0].synchronize, torch.spyre.synchronize, event.synchronize,
                 blocking_copy, torch.accelerator.synchronize]
        threads = [threading.Thread(target=w, daemon=True) for w in waits]
        [t.start() for t in threads]
        wait_until(lambda: gate.blocked_streams >= 5, what="5 streams at the gate")
        wait_for_waiters(5)
        assert all(t.is_alive() for t in threads)
    """,
    "daemon-threads-woken-during-finalization": """
        # The gate is a module global: finalization destroys (releases) it,
        # so the waits return while the interpreter finalizes. A short
        # _sleep ends by itself in the same window.
        a, b = torch.spyre.Stream(), torch.spyre.Stream()
        gate = Gate()
        gate.block(a)
        with b:
            torch.spyre._sleep(300)
        threads = [threading.Thread(target=f, daemon=True)
                   for f in (a.synchronize, b.synchronize, torch.spyre.synchronize)]
        [t.start() for t in threads]
        wait_for_waiters(3)
    """,
}


# Environment per scenario (default: none).
SCENARIO_ENV = {
    # 3 MiB of device memory: the daemon's 2.4 MB request needs a 20 MiB
    # segment, so the allocator releases its cache, waiting for the stream
    # that used the cached segment, held by a gate; finalization releases it.
    "daemon-thread-in-the-allocators-wait": {"FLEX_STUB_MEMORY_BYTES": str(3 << 20)},
}
SCENARIOS["daemon-thread-in-the-allocators-wait"] = """
        s = torch.spyre.Stream()
        with s:
            a = torch.empty(256, device="spyre")        # a 2 MiB small segment, used on s
        gate = Gate()
        gate.block(s)
        with s:
            torch.spyre._sleep(1)
        del a                                           # cached, s still busy
        t = threading.Thread(target=lambda: torch.empty(600_000, device="spyre"), daemon=True)
        t.start()
        wait_for_waiters(1)
        assert t.is_alive()                             # waiting for s before freeing
"""


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_exit_is_clean_and_quick(name):
    proc = run_python(PRELUDE + SCENARIOS[name].replace("\n        ", "\n") + EPILOGUE, timeout=120,
                      env=SCENARIO_ENV.get(name), check=False)
    exited = time.monotonic()
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    exit_seconds = exited - float(proc.stdout.split()[-1])
    assert exit_seconds < MAX_EXIT_SECONDS, f"exit took {exit_seconds:.1f} s"


def test_exit_from_a_non_main_thread():
    # os._exit from a worker while the main thread is blocked on gated work.
    proc = run_python(
        PRELUDE
        + """
s = torch.spyre.Stream()
gate = Gate()
gate.block(s)
def quit():
    wait_until(lambda: gate.blocked_streams >= 1, what="s to block at the gate")
    print(time.monotonic(), flush=True)
    import os; os._exit(0)
threading.Thread(target=quit).start()
s.synchronize()
""",
        timeout=120,
        check=False,
    )
    exited = time.monotonic()
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert exited - float(proc.stdout.split()[-1]) < MAX_EXIT_SECONDS


def test_sys_exit_with_work_queued_keeps_the_exit_code():
    proc = run_python(
        PRELUDE
        + """
import sys
g = Gate(); g.block()
torch.spyre._sleep(1)
sys.exit(7)
""",
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (7, "")
