"""Issue 18: DistributedDataParallel trains on spyre with the default process group.

One 2-rank torchrun job trains the same small model under each DDP
configuration for a few SGD steps, each rank on its half of a global batch.
Every rank must end with the parameters of a single-process run on the whole
batch (plain CPU, computed here), and both ranks with identical ones.
Two torchrun launches joined by a c10d rendezvous (two "nodes") train DDP across four ranks.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

from _helpers import NPROC, PRELUDE, rank_results, torchrun
from conftest import DEVICE_ENV

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # torchrun jobs (deadline: 300 s each)

STEPS = 3
BATCH = 4  # per rank
LR = 0.1


def make_model(unused=False):
    """The model both sides build (same seed: same initial parameters)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.body = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
            # A parameter forward never uses (find_unused_parameters=True).
            self.unused = nn.Linear(4, 4) if unused else None

        def forward(self, x):
            return self.body(x)

    return Net()


def make_data():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(STEPS, 2, NPROC * BATCH, 16, generator=g)  # 2 micro-batches per step
    y = torch.randn(STEPS, 2, NPROC * BATCH, 4, generator=g)
    return x, y


# Worker: the same definitions (the source of make_model/make_data is sent
# along), then one training run per configuration.
WORKER = """
from torch import nn
import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group()
r = dist.get_rank()
dev = torch.device("spyre", LOCAL_RANK)
x_all, y_all = make_data()
mine = slice(r * BATCH, (r + 1) * BATCH)


def user_hook(state, bucket):
    # Average by hand, then hand DDP the future of an async all_reduce.
    t = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def train(name, accumulate=False, hook=None, unused=False, **ddp_kwargs):
    model = make_model(unused=unused).to(dev)
    ddp = DDP(model, **ddp_kwargs)
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        micro = [0, 1] if accumulate else [0]
        for m in micro:
            x = x_all[step, m, mine].to(dev)
            y = y_all[step, m, mine].to(dev)
            if accumulate and m == 0:
                with ddp.no_sync():  # local accumulation, no communication
                    nn.functional.mse_loss(ddp(x), y).backward()
            else:
                nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    out[name] = {k: v.cpu().tolist() for k, v in model.state_dict().items()}


train("default")
train("device_ids", device_ids=[LOCAL_RANK])
train("small_buckets", bucket_cap_mb=0.001)  # a bucket per parameter or so
train("no_sync", accumulate=True)
train("find_unused", unused=True, find_unused_parameters=True)
train("static_graph", static_graph=True)
train("allreduce_hook", hook=default_hooks.allreduce_hook)
train("fp16_compress_hook", hook=default_hooks.fp16_compress_hook)
train("user_hook", hook=user_hook)
dist.destroy_process_group()
save()
"""

CONFIGS = {
    # name: (accumulate, unused, tolerance)
    "default": (False, False, None),
    "device_ids": (False, False, None),
    "small_buckets": (False, False, None),
    "no_sync": (True, False, None),
    "find_unused": (False, True, None),
    "static_graph": (False, False, None),
    "allreduce_hook": (False, False, None),
    # Gradients travel as float16: about 3 significant digits.
    "fp16_compress_hook": (False, False, dict(rtol=2e-3, atol=2e-4)),
    "user_hook": (False, False, None),
}


def reference(accumulate, unused):
    """One process, the whole batch: the mean loss over both ranks' samples."""
    model = make_model(unused=unused)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x_all, y_all = make_data()
    for step in range(STEPS):
        opt.zero_grad()
        for m in [0, 1] if accumulate else [0]:
            nn.functional.mse_loss(model(x_all[step, m]), y_all[step, m]).backward()
        opt.step()
    return model.state_dict()


def source(fn):
    import inspect

    return textwrap.dedent(inspect.getsource(fn))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ddp")
    script = (PRELUDE + f"STEPS, BATCH, LR, NPROC = {STEPS}, {BATCH}, {LR}, {NPROC}\n"
              + source(make_model) + source(make_data) + WORKER)
    torchrun(tmp_path, script, timeout=300)
    return rank_results(tmp_path)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_ddp_matches_the_single_process_run(trained, name):
    accumulate, unused, tolerance = CONFIGS[name]
    expected = reference(accumulate, unused)
    ranks = [{k: torch.tensor(v) for k, v in res[name].items()} for res in trained]
    assert sorted(ranks[0]) == sorted(expected)
    for key, want in expected.items():
        # All ranks hold the same parameters, bit for bit.
        assert torch.equal(ranks[0][key], ranks[1][key]), (name, key)
        torch.testing.assert_close(ranks[0][key], want, **(tolerance or {}), msg=f"{name}.{key}")
    # The model trained: the parameters moved from their initial values.
    initial = make_model(unused=unused).state_dict()
    assert not torch.equal(ranks[0]["body.0.weight"], initial["body.0.weight"])
    if unused:
        # find_unused_parameters: the unused layer got no gradient and stayed put.
        assert torch.equal(ranks[0]["unused.weight"], initial["unused.weight"])


def test_worker_results_are_json(trained):
    assert json.loads(json.dumps(trained[0]))  # the fixture really ran every config
    assert sorted(trained[0]) == sorted(CONFIGS)


@pytest.mark.slow
def test_distributed_benchmark_quick_run(tmp_path):
    # benchmarks/distributed.py (docs/performance.md) runs and reports every row;
    # speed itself is never asserted.
    from test_distributed import ROOT

    results = tmp_path / "rows.json"
    script = (ROOT / "benchmarks" / "distributed.py").read_text()
    script = script.replace("args = parser.parse_args()",
                            f"args = parser.parse_args(['--quick', '--json', {str(results)!r}])")
    torchrun(tmp_path, script, timeout=300)
    rows = json.loads(results.read_text())
    assert sorted(rows) == ["dist.all_reduce_64mib", "dist.ddp_backward_overlap",
                            "dist.ddp_step_mlp4"]
    for row in rows.values():
        assert row["ours"] > 0 and row["ref"] > 0


# ---------------------------------------------------------------- across two nodes


TWO_NODES = PRELUDE + """
from torch import nn
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("spyre")
ddp = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(world * 4, 8, generator=g), torch.randn(world * 4, 2, generator=g)
mine = slice(rank * 4, (rank + 1) * 4)
for _ in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(ddp(x[mine].to("spyre")), y[mine].to("spyre")).backward()
    opt.step()
out["where"] = [rank, world, LOCAL_RANK, str(next(model.parameters()).device)]
out["params"] = [p.detach().cpu().tolist() for p in model.parameters()]
dist.destroy_process_group()
save()
"""


@pytest.mark.slow
@pytest.mark.timeout(400)  # its own deadline is 300 s
def test_two_nodes_of_two_ranks_train_ddp_across_four_ranks(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "worker.py"
    path.write_text(TWO_NODES)
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    env["OUT_DIR"] = str(tmp_path)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}",
             f"--nproc-per-node={NPROC}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=two-nodes", str(path)],
            cwd=tmp_path, env=env, text=True, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for node in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=300))
    except subprocess.TimeoutExpired:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the two-node job timed out")
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr
    import json

    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    # Global ranks 0..3; on each node local ranks 0 and 1, each on spyre:LOCAL_RANK.
    wheres = sorted(res["where"] for res in results)
    assert [w[:2] for w in wheres] == [[r, 4] for r in range(4)]
    assert sorted((w[2], w[3]) for w in wheres) == [
        (0, "spyre:0"), (0, "spyre:0"), (1, "spyre:1"), (1, "spyre:1")]
    for res in results[1:]:
        assert res["params"] == results[0]["params"]  # one model across the four ranks
