"""Engine compute teams on cores (docs/tensors.md, "Engine threads on cores").

Each test runs in a fresh process: placement happens once per engine thread.
Threads are told apart by their CPU affinity, read from /proc. By default a
team of two or more threads is pinned while its threads get their cores;
SPYRE_PIN_ENGINE_TEAMS=1 pins every team always, 0 never.
"""

import json
import os

import pytest

from conftest import run_python

CORES = sorted(os.sched_getaffinity(0))
pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="placement needs two cores")

# Prints {"main": [...], "others": [[...], ...]}: the main thread's CPUs and
# every other thread's, after `body` ran.
REPORT = """
import json, os, threading
import torch

def affinities():
    main = os.getpid()
    others = [sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")
              if int(tid) != main]
    return {"main": sorted(os.sched_getaffinity(0)), "others": sorted(others)}
"""


PIN = {"SPYRE_PIN_ENGINE_TEAMS": "1"}


def report(body, env=PIN):
    result = run_python(REPORT + body + "\nprint(json.dumps(affinities()))\n", env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def pinned(threads):
    return sorted(cpus[0] for cpus in threads["others"] if len(cpus) == 1)


MATMUL = """
torch.set_num_threads(2)
a = torch.randn(256, 256)
a @ a  # the host's own OpenMP team: never placed
d = a.to("spyre")
d @ d
torch.spyre.synchronize()
"""


@pytest.mark.parametrize("env", [{}, {"SPYRE_PIN_ENGINE_TEAMS": "auto"}, PIN])
def test_an_engine_and_its_worker_run_on_cores_of_their_own(env):
    threads = report(MATMUL, env=env)
    assert pinned(threads) == [CORES[0], CORES[1]]
    assert threads["main"] == CORES
    assert sum(cpus == CORES for cpus in threads["others"]) >= 1  # the host's worker


def test_threads_the_runtime_starts_from_a_placed_engine_get_every_core():
    # A 64 MiB copy starts DMA workers from the (placed) engine that runs it.
    body = MATMUL + """
before = len(os.listdir("/proc/self/task"))
big = torch.empty(16 << 20, device="spyre")
big.copy_(torch.ones(16 << 20, device="spyre"))
torch.spyre.synchronize()
print("started", len(os.listdir("/proc/self/task")) - before)
"""
    result = run_python(REPORT + body + "\nprint(json.dumps(affinities()))\n", env=PIN)
    started = int(result.stdout.split("started ")[1].split()[0])
    threads = json.loads(result.stdout.strip().splitlines()[-1])
    assert started >= 1
    assert pinned(threads) == [CORES[0], CORES[1]]  # nothing new pinned


def test_a_one_thread_team_starts_on_the_core_of_its_device_index():
    # torchrun's ranks (OMP_NUM_THREADS=1) bind a device each: they spread out.
    body = """
torch.set_num_threads(1)
d = torch.randn(256, 256).to("spyre")
d @ d
torch.spyre.synchronize()
"""
    assert pinned(report(body, env={**PIN, "LOCAL_RANK": "0"})) == [CORES[0]]
    assert pinned(report(body, env={**PIN, "LOCAL_RANK": "1"})) == [CORES[1 % len(CORES)]]


def test_by_default_a_one_thread_team_is_left_to_the_scheduler():
    # It wakes no worker, so nothing is gained by pinning it.
    body = MATMUL.replace("torch.set_num_threads(2)", "torch.set_num_threads(1)")
    assert pinned(report(body, env={"LOCAL_RANK": "1"})) == []


# Placing a team is a parallel region of its own, whose worker then spins on a
# core for milliseconds: it waits for a kernel that may fork the team anyway
# (a tensor of at least 32768 elements, ATen's grain size, or a matmul-class or
# convolution op).
SMALL_OPS = """
torch.set_num_threads(2)
x = torch.randn(100, 11).to("spyre")
for _ in range(10):
    [x + 1, x * x, torch.relu(x), x.sum(dim=0), torch.exp(x), x.mean()]
big = torch.ones(32767).to("spyre")
big + 1  # one element short of a loop ATen splits
torch.spyre.synchronize()
print("small", len(os.listdir("/proc/self/task")), pinned(affinities()))
"""


def pinned_in(line):
    return json.loads(line.split(" ", 2)[2])


@pytest.mark.parametrize("env", [{}, PIN])
def test_small_kernels_leave_the_team_unplaced(env):
    body = "def pinned(t): return sorted(c[0] for c in t['others'] if len(c) == 1)\n" + SMALL_OPS
    placed = run_python(REPORT + body, env=env).stdout.split()
    assert placed[0] == "small" and placed[2:] == ["[]"]


@pytest.mark.parametrize(
    "kernel",
    [
        "big = torch.ones(32768).to('spyre')\nbig + 1",
        "m = torch.randn(16, 16).to('spyre')\nm @ m",
        "m = torch.randn(16, 16).to('spyre')\ntorch.addmm(m, m, m)",
    ],
    ids=["32768_elements", "small_matmul", "small_addmm"],
)
@pytest.mark.parametrize("env", [{}, PIN])
def test_the_first_kernel_that_may_fork_the_team_places_it(kernel, env):
    body = ("def pinned(t): return sorted(c[0] for c in t['others'] if len(c) == 1)\n" + SMALL_OPS
            + kernel + "\ntorch.spyre.synchronize()\n")
    threads = report(body, env=env)
    assert pinned(threads) == [CORES[0], CORES[1]]


@pytest.mark.parametrize(
    "env",
    [
        {"SPYRE_PIN_ENGINE_TEAMS": "0"},
        {"OMP_PROC_BIND": "false"},
        {**PIN, "OMP_PROC_BIND": "false"},
    ],
)
def test_placement_is_off_when_asked_or_when_openmp_binding_is_configured(env):
    # OMP_PROC_BIND set at all means the user chose how OpenMP threads bind
    # ("false": not at all), so no thread is pinned.
    assert pinned(report(MATMUL, env=env)) == []


# A CPU-bound process on the second core, started after a first matmul placed
# the team. Conditions are polled: each wait ends when the team's state
# changes (trials are at most 16 s of back-off apart).
NEIGHBOUR = MATMUL + f"""
import atexit, subprocess, sys, time
def team_pinned():
    return sorted(cpus[0] for cpus in affinities()["others"] if len(cpus) == 1)
def compute(n=20):
    for _ in range(n):
        d @ d
    torch.spyre.synchronize()
def compute_until(condition):
    deadline = time.monotonic() + 60
    while not condition(team_pinned()):
        assert time.monotonic() < deadline, team_pinned()
        compute()
print("start", team_pinned())
busy = subprocess.Popen([sys.executable, "-c",
                         "import os; os.sched_setaffinity(0, {{{CORES[1]}}})\\nwhile True: pass"])
atexit.register(busy.kill)  # a failed assertion must not leave it running
"""
BOTH = [CORES[0], CORES[1]]


def test_a_team_sharing_a_core_with_a_busy_neighbour_is_released():
    # More load than the neighbour only releases it sooner.
    body = NEIGHBOUR + """
compute_until(lambda cpus: cpus == [])
print("released")
"""
    lines = run_python(REPORT + body).stdout.splitlines()
    assert lines == [f"start {BOTH}", "released"]


def machine_load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def test_a_released_team_is_pinned_again_once_its_cores_are_free():
    # Re-pinning needs cores no other program keeps busy: on a busy machine the
    # team stays released (that is the design), so there is nothing to observe.
    if machine_load() > 1.5:
        pytest.skip(f"the machine is busy (load average {machine_load()}): no core is free")
    body = NEIGHBOUR + f"""
compute_until(lambda cpus: cpus == [])
print("released")
busy.kill()
busy.wait()
compute_until(lambda cpus: cpus == {BOTH})
print("pinned again")
"""
    lines = run_python(REPORT + body).stdout.splitlines()
    assert lines == [f"start {BOTH}", "released", "pinned again"]


def test_a_team_pinned_always_is_not_released():
    # 50 matmuls under the neighbour: the default would release the team
    # after its first 25 ms window. What is deterministic: every thread pinned
    # at the start keeps its core. (On a busy machine another engine may run
    # some of the matmuls and pin a team of its own: not asserted.)
    body = NEIGHBOUR + """
def pinned_threads():
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        cpus = sorted(os.sched_getaffinity(int(tid)))
        if int(tid) != os.getpid() and len(cpus) == 1:
            threads[tid] = cpus[0]
    return threads
first = pinned_threads()
compute(50)
later = pinned_threads()
print("kept", sorted(first.values()), all(later.get(tid) == cpu for tid, cpu in first.items()))
"""
    lines = run_python(REPORT + body, env=PIN).stdout.splitlines()
    assert lines == [f"start {BOTH}", f"kept {BOTH} True"]


def test_a_bad_setting_raises_at_every_launch_and_names_the_value():
    result = run_python(
        """
import torch
x = torch.ones(4, device="spyre")
for _ in range(2):
    try:
        x + x
    except ValueError as e:
        print(e)
""",
        env={"SPYRE_PIN_ENGINE_TEAMS": "yes"},
    )
    message = (
        "SPYRE_PIN_ENGINE_TEAMS='yes' is not valid (expected auto or unset to pin each engine's "
        "intra-op threads to cores of their own while no other thread needs those cores, 1 to "
        "pin them always, or 0 to leave them to the OS scheduler)"
    )
    assert result.stdout.splitlines() == [message, message]


def test_a_process_on_one_core_is_left_alone():
    code = f"import os\nos.sched_setaffinity(0, {{{CORES[0]}}})\n" + REPORT + MATMUL.replace(
        "torch.set_num_threads(2)\n", "")
    out = run_python(code + "\nprint(json.dumps(affinities()))\n", env=PIN).stdout
    threads = json.loads(out.strip().splitlines()[-1])
    assert threads["main"] == [CORES[0]]
    assert all(cpus == [CORES[0]] for cpus in threads["others"])
