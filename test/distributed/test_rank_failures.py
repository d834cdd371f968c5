"""A rank that dies or fails in a torchrun job: the others fail with a clear error within the
process group's timeout (mid-collective, or inside DDP's backward), and `torchrun
--max-restarts=1` restarts a job whose rank fails once, and the job completes."""

import textwrap

import pytest

from _helpers import PRELUDE, rank_results, torchrun

pytestmark = pytest.mark.slow  # torchrun jobs

PG_TIMEOUT = 30  # seconds


def test_a_rank_dying_mid_collective_fails_the_others_clearly(tmp_path):
    torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            f"""
        import time
        from datetime import timedelta
        dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
        r = dist.get_rank()
        t = torch.ones(4, device="spyre")
        dist.all_reduce(t)  # both ranks are alive here
        store = dist.distributed_c10d._get_default_store()
        if r == 1:
            store.wait(["rank0 enters"])  # rank 0 is at the next all_reduce
            os._exit(0)                   # dies without joining it
        store.set("rank0 enters", "1")
        start = time.monotonic()
        out["error"] = error(lambda: dist.all_reduce(t))
        out["seconds"] = time.monotonic() - start
        out["t"] = t.cpu().tolist()  # nothing was copied back
        save()
        os._exit(0)  # the peer is gone: skip the group's teardown
        """
        ),
        timeout=PG_TIMEOUT + 60,
    )
    res = (tmp_path / "rank0.json").read_text()
    import json

    res = json.loads(res)
    kind, message = res["error"]
    assert kind == "RuntimeError"
    # gloo names the peer's connection (closed or reset), not a hang.
    assert "Connection closed by peer" in message or "Connection reset by peer" in message, message
    assert res["seconds"] < PG_TIMEOUT
    assert res["t"] == [2.0] * 4


def test_ddp_survivor_raises_when_a_rank_dies_inside_backward(tmp_path):
    # Rank 1 dies at the start of its backward (a hook on the model's output),
    # without joining DDP's all_reduce; rank 0's backward must raise the
    # connection error, not crash. os._exit(0): torchrun leaves the survivor
    # running (a non-zero exit would make it tear the job down).
    torchrun(
        tmp_path,
        PRELUDE
        + f"""
import time
from datetime import timedelta
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
r = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Linear(4, 2).to("spyre"))
x = torch.ones(3, 4, device="spyre")
model(x).sum().backward()  # both ranks alive: one full step
y = model(x)
if r == 1:
    y.register_hook(lambda grad: os._exit(0))
start = time.monotonic()
out["error"] = error(lambda: y.sum().backward())
out["seconds"] = time.monotonic() - start
save()
os._exit(0)  # the peer is gone: skip the group's teardown
""",
        timeout=PG_TIMEOUT + 60,
    )
    import json

    res = json.loads((tmp_path / "rank0.json").read_text())
    kind, message = res["error"]
    assert kind in ("RuntimeError", "DistBackendError"), res
    assert "Connection closed by peer" in message or "Connection reset by peer" in message, message
    assert res["seconds"] < PG_TIMEOUT


def test_torchrun_max_restarts_recovers_from_a_rank_failing_once(tmp_path):
    proc = torchrun(
        tmp_path,
        PRELUDE
        + textwrap.dedent(
            """
        import sys
        attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
        dist.init_process_group()
        r = dist.get_rank()
        t = torch.full((2,), r + 1.0, device="spyre")
        dist.all_reduce(t)
        if attempt == 0 and r == 1:
            sys.exit(3)  # fails once, on purpose
        dist.barrier()
        out["attempt"] = attempt
        out["sum"] = [str(t.device), t.cpu().tolist()]
        dist.destroy_process_group()
        save()
        """
        ),
        launcher_args=("--standalone", "--max-restarts=1"),
        # torch 2.13's torchrun shares its rendezvous store with the workers
        # across restarts, with no per-attempt prefix: gloo (CPU-only jobs too)
        # then reads the previous attempt's addresses and fails or hangs.
        # This is torch's opt-out (docs/distributed.md, "Bad input and failures").
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"},
        timeout=180,
    )
    assert proc.returncode == 0
    assert rank_results(tmp_path) == [
        {"attempt": 1, "sum": ["spyre:0", [3.0, 3.0]]},
        {"attempt": 1, "sum": ["spyre:1", [3.0, 3.0]]},
    ]
