"""spyreccl and interpreter exit: gloo's threads never hold a tensor that has
a Python object (docs/distributed.md, "Exit").

gloo releases a finished work's tensors on its own thread, after the work's
future completed. A tensor with a Python object takes the GIL there; when
that falls inside Py_FinalizeEx (a busy machine, a script's last collective),
the process ends with std::terminate. Whether it falls there is timing, so
this checks the cause deterministically: while a work is in flight on gloo
(its peer has not issued it yet), the Python object of a tensor it was given
is freed as soon as the caller drops it, because gloo holds an alias made in
C++. Handing gloo the tensor itself keeps the object alive (the control).
"""

from test_distributed import PRELUDE, rank_results, torchrun

HELD = PRELUDE + """
import gc, weakref
from datetime import timedelta
dist.init_process_group(timeout=timedelta(seconds=60))
r = dist.get_rank()
store = dist.distributed_c10d._get_default_store()
calls = dist.distributed_c10d._get_default_group()._gloo  # spyreccl's GlooCalls

def in_flight(name, issue):
    # Rank 0 issues first and looks while rank 1 holds back: the work cannot
    # have finished, so gloo still holds what it was given.
    t = torch.full((4,), r + 1.0)
    data = t.detach()  # the same memory, a Python object gloo never gets
    ref = weakref.ref(t)
    if r == 0:
        work = issue(t)
        del t
        gc.collect()
        out[name + ".python_object_alive"] = ref() is not None
        store.set(name, "checked")
    else:
        store.wait([name])
        work = issue(t)
        del t
    work.wait()
    out[name + ".result"] = data.tolist()

in_flight("spyreccl", lambda t: calls.allreduce([t]))
in_flight("gloo_itself", lambda t: calls.backend.allreduce([t]))
gathered = torch.zeros(8)
in_flight("spyreccl.allgather", lambda t: calls._allgather_base(gathered, t))
out["spyreccl.allgather.gathered"] = gathered.tolist()
dist.destroy_process_group()
save()
"""


def test_gloo_never_holds_a_python_object(tmp_path):
    torchrun(tmp_path, HELD)
    rank0, rank1 = rank_results(tmp_path)
    assert rank0 == {
        "spyreccl.python_object_alive": False,
        "spyreccl.result": [3.0] * 4,
        "gloo_itself.python_object_alive": True,  # the control: what gloo alone does
        "gloo_itself.result": [3.0] * 4,
        "spyreccl.allgather.python_object_alive": False,
        "spyreccl.allgather.result": [1.0] * 4,
        "spyreccl.allgather.gathered": [1.0] * 4 + [2.0] * 4,
    }
    assert rank1 == {
        "spyreccl.result": [3.0] * 4,
        "gloo_itself.result": [3.0] * 4,
        "spyreccl.allgather.result": [2.0] * 4,
        "spyreccl.allgather.gathered": [1.0] * 4 + [2.0] * 4,
    }
