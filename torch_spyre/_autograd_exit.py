"""Clean exit after backward(): spyre's autograd device thread holds no Python
object when the interpreter finalizes (docs/reliability.md, "Autograd device
threads at exit").

torch's autograd engine runs spyre nodes on a device thread (`pt_autograd_<i>`).
After the last node of a backward() it completes the graph task, wakes the
caller and only then drops its reference to the task: the task holds the
contextvars.Context that backward() stashed, hooks, callbacks and nodes with
Python objects. When the caller reaches interpreter finalization first, that
drop takes the GIL during Py_FinalizeEx, CPython ends the thread with a forced
unwind through a noexcept frame, and the process aborts (exit 134).

At exit, while threads may still take the GIL, an empty backward pass is run
through that thread (its work is one task at a time): when it completes, the
user's last graph task is gone. The pass's own task holds no Python object.
"""

import atexit
import os

from . import _C

# The device thread is normally idle at exit; this bounds the wait when a
# user's backward is still running on it (the exit then goes on as before).
DRAIN_TIMEOUT_SECONDS = 5.0


def _autograd_device_thread_started(index: int) -> bool:
    """Whether torch started its autograd device threads (the first backward()
    does; draining must not start them)."""
    name = f"pt_autograd_{index}"
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().strip() == name:
                    return True
        except OSError:
            continue  # the thread ended meanwhile
    return False


def drain_autograd_device_thread() -> bool:
    """Make the bound device's autograd thread drop the graph tasks of earlier
    backward() calls. Returns False when there was nothing to drain or it did
    not finish in time."""
    # Only a started runtime has a bound device (asking otherwise may raise,
    # e.g. for a bad LOCAL_RANK the process already reported).
    if not _C._is_initialized():
        return False
    index = _C._bound_device()
    if index < 0 or not _autograd_device_thread_started(index):
        return False
    return _C._drain_autograd_device_thread(index, DRAIN_TIMEOUT_SECONDS)


atexit.register(drain_autograd_device_thread)
