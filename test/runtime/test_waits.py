"""Issue 16: waits that fit the device. Host waits and idle engines spin
briefly, then park (docs/flex_stub.md, "Waits"): an idle process with a
started runtime uses no CPU, and waits on long work still sleep.

The CPU each takes over a stretch of wall time is a load-sensitive window: those
measurements are in the slow tier; that a waiter parks is checked in the inner one."""

import threading
import time

import pytest
import torch
import torch_spyre
from torch_spyre.testing import Gate

from _helpers import WAIT_UNTIL, wait_until
from conftest import run_python

# utime + stime of every thread of the process, in clock ticks (/proc/self/stat
# fields 14 and 15; the command name before them may contain spaces), and the
# scheduler state of a thread (field 3: R running or runnable, S sleeping, ...).
TICKS = """
import os

def ticks():
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])

def thread_state(tid):
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]

def others_asleep():
    # Every thread but the caller sleeps: no spin, no linger is left.
    me = threading.get_native_id()
    return all(thread_state(tid) != "R" for tid in os.listdir("/proc/self/task") if int(tid) != me)
"""


@pytest.mark.slow  # CPU ticks over 1 s of wall time
def test_an_idle_process_with_a_started_runtime_uses_no_cpu():
    proc = run_python(
        "import threading\n" + TICKS + WAIT_UNTIL
        + """
import time, torch
x = torch.randn(1 << 20, device="spyre")           # engines and DMA workers started
torch.spyre.synchronize()                          # the streams below read x
streams = [torch.spyre.Stream() for _ in range(4)] + [torch.spyre.host_compute_stream()]
for s in streams:
    for _ in range(20):                              # round trips: engines linger, hosts spin
        with s:
            torch.spyre._sleep(0)
            y = x * 2
        s.synchronize()
e = torch.spyre.Event()
e.record(); e.synchronize()
assert y.sum().item() == (x * 2).sum().item()
wait_until(others_asleep, timeout=30, what="every thread to sleep", interval=0.01)
t0, c0 = ticks(), time.process_time()
time.sleep(1.0)
print(ticks() - t0, time.process_time() - c0, os.sysconf("SC_CLK_TCK"))
"""
    )
    ticks, cpu_seconds, hz = proc.stdout.split()
    # A spinning thread would read ~100 ticks (1 s). At most one tick for the
    # main thread's own wake-up landing on a tick boundary.
    assert int(ticks) <= 1, proc.stdout
    assert float(cpu_seconds) < 0.005, proc.stdout  # under 0.5 % of one core
    assert int(hz) > 0


def thread_state(tid):
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def park_a_waiter(measure=None):
    """A thread synchronizes a gated stream; once it parked, `measure()` runs (the wait
    still held), then the gate opens. Returns what `measure` returned."""
    s = torch.spyre.Stream()
    gate = Gate()
    gate.block(s)
    with s:
        torch.spyre._sleep(0)
    done = threading.Event()
    waiter = threading.Thread(target=lambda: (s.synchronize(), done.set()))
    waiter.start()
    wait_until(lambda: torch_spyre._C._threads_in_host_waits() >= 1, what="the synchronize to wait")
    # Past the spin: parked (asleep) from here on.
    wait_until(lambda: thread_state(waiter.native_id) == "S", what="the waiter to park")
    measured = measure() if measure else None
    assert not done.is_set()
    gate.release()
    waiter.join(timeout=30)
    assert done.is_set() and s.query()
    return measured


def test_a_host_waiting_on_gated_work_parks():
    park_a_waiter()


@pytest.mark.slow  # process CPU time over 0.3 s of wall time
def test_a_parked_host_wait_uses_no_cpu():
    def cpu_over_a_while():
        before = time.process_time()
        time.sleep(0.3)
        return time.process_time() - before

    used = park_a_waiter(cpu_over_a_while)
    assert used < 0.03, used  # a spinning waiter would use ~0.3 s
