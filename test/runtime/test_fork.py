"""Issue 14: fork safety. A child forked while other threads of the parent
allocate and free spyre tensors (device blocks and pinned host blocks) must be
able to free the tensors it inherited and exit; it cannot use the device
(`_is_in_bad_fork()`), as with CUDA.

Every lock the child can take is held across fork() by the forking thread
(pthread_atfork), so the child never finds one held by a thread that does not
exist there. A hung child is killed by its own SIGALRM (default action) and
counted; no sleep is used to synchronize.
"""

import pytest

from _helpers import WAIT_UNTIL
from conftest import run_python

FORKS_UNDER_CHURN = """
import os, signal, threading, torch

FORKS = {forks}
CHILD_SECONDS = 60  # a child normally exits in milliseconds; 60 s: even on a busy machine

stop = threading.Event()
rounds = [0, 0]

def churn(slot):
    side = torch.spyre.Stream()
    while not stop.is_set():
        small = torch.empty(1024, device="spyre")        # small pool
        large = torch.empty(3 << 18, device="spyre")     # 3 MiB: large pool
        small.record_stream(side)                        # free records an event
        pinned = torch.empty(4096).pin_memory()          # pinned host pool
        small.copy_(pinned[:1024], non_blocking=True)    # pinned free records one too
        del small, large, pinned
        rounds[slot] += 1

inherited = [torch.ones(256, device="spyre") for _ in range(4)]
inherited += [torch.ones(1 << 20, device="spyre"), torch.ones(512).pin_memory()]
inherited[0].record_stream(torch.spyre.Stream())
inherited[1].copy_(inherited[-1][:256], non_blocking=True)  # the child's free records an event
torch.spyre.synchronize()
threads = [threading.Thread(target=churn, args=(i,)) for i in range(2)]
for t in threads:
    t.start()

# Fork only once both threads run their loop.
wait_until(lambda: min(rounds) > 0, what="both churn threads to run")

hung = []
for i in range(FORKS):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(CHILD_SECONDS)
        ok = torch.spyre._is_in_bad_fork()
        del inherited[:]                       # frees device and pinned blocks
        torch.accelerator.empty_cache()        # takes the device allocator's lock
        torch.accelerator.empty_host_cache()   # and the pinned allocator's
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        hung.append(i)
    else:
        assert os.waitstatus_to_exitcode(status) == 0, (i, status)

stop.set()
for t in threads:
    t.join()
# The parent is unaffected: its allocator still works and its values are exact.
assert inherited[0].cpu().sum().item() == 256
assert torch.ones(8, device="spyre").add(1).cpu().tolist() == [2.0] * 8
print(len(hung), hung[:10])
"""


def _forks_under_churn(forks, timeout):
    proc = run_python(WAIT_UNTIL + FORKS_UNDER_CHURN.format(forks=forks), timeout=timeout)
    assert proc.stdout == "0 []\n", proc.stdout


def test_ten_forks_under_allocator_churn_never_hang():
    _forks_under_churn(10, timeout=120)


@pytest.mark.slow  # repeat-N stress
@pytest.mark.timeout(400)  # its own deadline is 300 s
def test_fifty_forks_under_allocator_churn_never_hang():
    _forks_under_churn(50, timeout=300)


@pytest.mark.slow
@pytest.mark.timeout(1000)  # its own deadline is 900 s
def test_five_hundred_forks_under_allocator_churn_never_hang():
    _forks_under_churn(500, timeout=900)


SEEDING_UNDER_DRAWS = """
import os, signal, threading, torch

stop = threading.Event()
rounds = [0, 0]

def draw(slot):
    while not stop.is_set():
        torch.randn(4096, device="spyre")   # holds the spyre generator while drawing
        rounds[slot] += 1

threads = [threading.Thread(target=draw, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
wait_until(lambda: min(rounds) > 0, what="both drawing threads to run")

hung = []
for i in range({forks}):
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.alarm(60)  # it exits in milliseconds; 60 s: even on a busy machine
        torch.manual_seed(i)        # what a DataLoader worker does (skips spyre in a bad fork)
        torch.spyre.manual_seed(i)  # the spyre generators live on the host: usable here
        state = torch.spyre.get_rng_state()
        torch.spyre.set_rng_state(state)
        os._exit(0 if torch.spyre.initial_seed() == i else 3)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGALRM:
        hung.append(i)
    else:
        assert os.waitstatus_to_exitcode(status) == 0, (i, status)

stop.set()
for t in threads:
    t.join()
torch.manual_seed(5)
assert torch.equal(torch.randn(8, device="spyre").cpu(), torch.randn(8, generator=torch.Generator().manual_seed(5)))
print(len(hung), hung[:10])
"""


@pytest.mark.timeout(700)  # its own deadline is 600 s
@pytest.mark.parametrize("forks", [10, pytest.param(100, marks=pytest.mark.slow)])  # 100: stress
def test_forked_children_seed_while_parent_threads_draw(forks):
    # Parent threads hold the default generator's lock while they draw.
    proc = run_python(WAIT_UNTIL + SEEDING_UNDER_DRAWS.format(forks=forks), timeout=600)
    assert proc.stdout == "0 []\n", proc.stdout


def test_a_forked_child_never_takes_the_stream_pool_lock():
    # A parent thread may hold it at fork(); every pool entry point raises the
    # fork error in the child before locking (the test helper used not to).
    run_python(
        """
        import os, torch
        torch.spyre.init()
        pid = os.fork()
        if pid == 0:
            code = 0
            for call in (torch.spyre._C._mapped_stream_count, torch.spyre.Stream,
                         torch.spyre.current_stream, torch.spyre.synchronize,
                         torch.spyre.host_compute_stream):
                try:
                    call()
                    code = 1
                except RuntimeError as e:
                    if "Cannot re-initialize Spyre in forked subprocess" not in str(e):
                        code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        assert torch.spyre._C._mapped_stream_count() == 5  # id 0 and host-compute 65-68
        """
    )
