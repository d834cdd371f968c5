"""Issue 31 item 4: spyreccl under a late peer.

A late peer must not block a caller's `async_op=True` calls: the progress
thread waits for peers (the cross-rank signature exchange, a pipelined
all_reduce's staging) outside the lock callers take.
"""

import pytest

from test_distributed import PRELUDE, rank_results, torchrun

PG_TIMEOUT = 30  # seconds
LATE = 3.0  # how long rank 1 is late at most, in seconds
PROMPT = 1.0  # bound on rank 0's second async call, in seconds (well below LATE)


@pytest.mark.slow
def test_async_all_reduce_returns_while_a_peer_is_late(tmp_path):
    # Rank 1 joins each round only once rank 0's two async calls returned (a
    # store key rank 0 sets), or LATE seconds after it started waiting. Rank 0
    # makes its second call once its progress thread waits in the exchange
    # of the first (for rank 1). Round 0: small tensors; round 1: 17 MiB (a
    # pipelined all_reduce: exchange and staging waits).
    torchrun(
        tmp_path,
        PRELUDE
        + f"""
import time
from datetime import timedelta
dist.init_process_group(timeout=timedelta(seconds={PG_TIMEOUT}))
r = dist.get_rank()
store = dist.distributed_c10d._get_default_store()
import torch_spyre.distributed.consistency as consistency
in_exchange = threading.Event()
rows = consistency._Exchange.rows

def rows_telling(self):
    in_exchange.set()  # the progress thread is about to wait for the peers
    return rows(self)

consistency._Exchange.rows = rows_telling
for round, numel in enumerate([4, 17 * 2**20 // 4]):
    in_exchange.clear()
    a = torch.full((numel,), r + 1.0, device="spyre")
    b = torch.full((numel,), 10.0 * (r + 1), device="spyre")
    if r == 1:
        start = time.monotonic()
        try:
            store.wait([f"called{{round}}"], timedelta(seconds={LATE}))
            out[f"late{{round}}"] = "released"
        except dist.DistStoreError:
            out[f"late{{round}}"] = "timed out"
        wa = dist.all_reduce(a, async_op=True)
        wb = dist.all_reduce(b, async_op=True)
    else:
        wa = dist.all_reduce(a, async_op=True)
        out[f"in_exchange{{round}}"] = in_exchange.wait({PG_TIMEOUT})
        start = time.monotonic()
        wb = dist.all_reduce(b, async_op=True)
        out[f"second_call{{round}}"] = time.monotonic() - start
        store.set(f"called{{round}}", "1")
    wa.wait()
    wb.wait()
    out[f"a{{round}}"] = torch.unique(a.cpu()).tolist()
    out[f"b{{round}}"] = torch.unique(b.cpu()).tolist()
dist.destroy_process_group()
save()
""",
        timeout=PG_TIMEOUT + 90,
    )
    rank0, rank1 = rank_results(tmp_path)
    for round in (0, 1):
        assert rank0[f"in_exchange{round}"] is True
        assert rank0[f"second_call{round}"] < PROMPT, rank0
        # Rank 0's calls returned before rank 1 gave up waiting for them.
        assert rank1[f"late{round}"] == "released"
        for res in (rank0, rank1):
            assert res[f"a{round}"] == [3.0]
            assert res[f"b{round}"] == [30.0]
