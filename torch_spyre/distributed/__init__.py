"""spyreccl: the c10d backend of the spyre device (docs/distributed.md).

Spyre has no collective engine of its own here, so a gloo process group that
spyreccl owns (same store, rank and size) moves the bytes, following the
caller's streams as NCCL does:

- at the call, an event is recorded on the caller's current stream (the host
  does not wait);
- the group's progress thread, in call order, waits for that event and issues
  the collective on gloo (after comparing it across ranks);
- when gloo is done, an event is recorded on the group's communication
  stream; `wait()` makes the caller's current stream wait for it and
  `get_future()` completes a device future at the same point.

gloo works on the device memory itself ("direct", as the card's collective
engine would) where it can: a contiguous tensor without conj/neg bits, not
needing a private copy. It does so only inside the collective's peer access
window, a runtime operation queued on the communication stream after the
caller's event: the window opens when that stream reaches it and holds the
stream until gloo is done. Other spyre tensors, and every one under
SPYRECCL_STAGING=1, are staged: copied to pinned host memory on the caller's
stream before the event, and the results copied back on the communication
stream. Every spyre collective also gets a window when its tensors are staged
(closed as soon as it opens: it only tells that the communication stream did
not fail before the collective) and a hold on the group's hold stream, which
`synchronize()` waits for and which closes once the communication stream has
run the collective's copies back.

CPU tensors go straight to gloo, so one process group serves both devices.
`torch_spyre/__init__.py` registers the backend; this package loads lazily, at
the first process group that uses it.

Modules: `staging` (views used in a peer access window, and host twins), `work` (SpyreCCLWork),
`consistency` (the cross-rank signature exchange), `progress` (the progress
and completion threads), `pipeline` (a large all_reduce in pieces),
`process_group` (ProcessGroupSpyreCCL, create_backend).

Threading contract
------------------
Threads:

- Callers: any Python thread calling a collective. At the call they enqueue
  the staging copies and record an event on their current stream, then take
  `_Progress._lock` to queue the collective or, when nothing is queued, to
  issue it on gloo themselves (CPU tensors only). Issuing a gloo collective
  only enqueues it on gloo's threads.
- `spyreccl-progress` (one per group, started at its first queued
  collective): in call order, waits for each collective's staging event and
  peer access window (host waits, without the GIL), runs the signature exchange (a small gloo
  all-gather it waits for: it blocks until every rank has called the same
  collective), and issues the collective on gloo. A pipelined all_reduce also
  waits here for each piece's staging copy.
- `spyreccl-completion` (one per group): in order, waits for each
  collective's gloo work (until every rank has done its part), closes its
  window, enqueues the copies back on the communication stream and the close
  of its hold after them, and completes the SpyreCCLWork.
  If either thread dies, the collectives it holds or still has queued fail
  ("the progress thread stopped before completing it") and their windows and
  holds close: no stream stays parked on a collective that will never finish.
- gloo's own threads move the bytes. They never touch Python: every gloo
  collective is issued through `gloo_calls.GlooCalls`, which hands gloo
  aliases made in C++ (a tensor with a Python object would take the GIL when
  gloo releases it, possibly during interpreter exit: std::terminate).

Locks (none is held while waiting for a peer or the device):

- `_Progress._lock`: `_pending` (collectives queued or being issued by the
  progress thread), the order in which collectives reach the queue, and a
  caller's direct launch while nothing is pending (so it cannot overtake a
  queued collective: gloo matches collectives across ranks by issue order).
  The progress thread takes it only to count a collective done, after issuing
  it: the exchange and the staging waits run outside it, so a caller's next
  `async_op=True` call returns at once even while a peer is late. A caller
  queues a collective's window on the communication stream under it too, so
  windows open in the order the progress thread issues them.
- `SpyreCCLWork._lock`: the hand-over of the result between the completion
  thread (`_complete`) and `get_future()` (the future is created once and
  settled exactly once).
- `ProcessGroupSpyreCCL._comm_stream_lock`: creating the communication
  stream once.

What may block where: `Work.wait()` (the caller, up to the group's timeout),
the progress thread (staging events, the exchange: on peers and the caller's
streams), the completion thread (gloo works: on peers), `shutdown()` and the
exit hook (joining the threads, with a timeout).
"""

from .process_group import (  # noqa: F401 (re-exported)
    BACKEND_NAME,
    SUPPORTED,
    ProcessGroupSpyreCCL,
    create_backend,
)
from .staging import _staging_forced  # noqa: F401 (re-exported)
from .work import SpyreCCLWork

__all__ = ["ProcessGroupSpyreCCL", "SpyreCCLWork", "create_backend"]
