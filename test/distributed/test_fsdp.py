"""Issue 18: FSDP2 (fully_shard) and DTensor on spyre, against single-process references.

One 2-rank torchrun job: FSDP2 trains the model of test_ddp.py for a few SGD
steps (each rank on its half of the batch; the full parameters must equal a
single-process run on the whole batch), then DTensor is driven through
distribute_tensor, full_tensor, redistribute and a DeviceMesh("spyre", ...),
with exact expected values.
"""

import pytest
import torch

from test_ddp import BATCH, LR, STEPS, make_data, make_model, reference, source
from _helpers import NPROC, PRELUDE, rank_results, torchrun

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # a torchrun job (deadline: 300 s)

WORKER = """
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

dist.init_process_group()
r = dist.get_rank()
dev = torch.device("spyre", LOCAL_RANK)
mesh = init_device_mesh("spyre", (NPROC,))

# FSDP2: each Linear its own unit, then the root.
model = make_model().to(dev)
for layer in model.body:
    if isinstance(layer, nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.SGD(model.parameters(), lr=LR)
x_all, y_all = make_data()
mine = slice(r * BATCH, (r + 1) * BATCH)
for step in range(STEPS):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x_all[step, 0, mine].to(dev)), y_all[step, 0, mine].to(dev))
    loss.backward()
    opt.step()
out["fsdp.types"] = sorted({type(p).__name__ for p in model.parameters()})
out["fsdp"] = {k: v.full_tensor().cpu().tolist() for k, v in model.state_dict().items()}

# DTensor on a 1-d mesh.
x = torch.arange(8.0).reshape(4, 2)
d = distribute_tensor(x.to(dev), mesh, [Shard(0)])
out["dt.local"] = [str(d.to_local().device), d.to_local().cpu().tolist()]
out["dt.full"] = d.full_tensor().cpu().tolist()
out["dt.shard1"] = d.redistribute(mesh, [Shard(1)]).to_local().cpu().tolist()
out["dt.replicate"] = d.redistribute(mesh, [Replicate()]).to_local().cpu().tolist()
# A partial sum (each rank holds r + 1), reduced on redistribute.
p = torch.distributed.tensor.DTensor.from_local(
    torch.full((2,), r + 1.0, device=dev), mesh, [Partial()])
out["dt.partial"] = p.redistribute(mesh, [Replicate()]).to_local().cpu().tolist()
# Ops on DTensors: a sharded sum, a matmul of a sharded by a replicated matrix.
out["dt.sum"] = d.sum().full_tensor().cpu().tolist()
m = DeviceMesh("spyre", list(range(NPROC)))
a = distribute_tensor(torch.arange(16.0).reshape(4, 4).to(dev), m, [Shard(0)])
b = distribute_tensor(torch.eye(4).mul(2).to(dev), m, [Replicate()])
out["dt.mm"] = (a @ b).full_tensor().cpu().tolist()
out["dt.mesh"] = [m.device_type, m.size()]
dist.destroy_process_group()
save()
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("fsdp")
    script = (PRELUDE + f"STEPS, BATCH, LR, NPROC = {STEPS}, {BATCH}, {LR}, {NPROC}\n"
              + source(make_model) + source(make_data) + WORKER)
    torchrun(tmp_path, script, timeout=300)
    return rank_results(tmp_path)


def test_fsdp2_matches_the_single_process_run(results):
    expected = reference(accumulate=False, unused=False)
    for res in results:
        assert res["fsdp.types"] == ["DTensor"]  # the parameters are sharded
        got = {k: torch.tensor(v) for k, v in res["fsdp"].items()}
        assert sorted(got) == sorted(expected)
        for key, want in expected.items():
            torch.testing.assert_close(got[key], want, msg=key)
    assert results[0]["fsdp"] == results[1]["fsdp"]


def test_distribute_tensor_and_redistribute(results):
    x = torch.arange(8.0).reshape(4, 2)
    for rank, res in enumerate(results):
        assert res["dt.local"] == [f"spyre:{rank}", x[2 * rank:2 * rank + 2].tolist()]
        assert res["dt.full"] == x.tolist()
        assert res["dt.shard1"] == x[:, rank:rank + 1].tolist()
        assert res["dt.replicate"] == x.tolist()
        assert res["dt.partial"] == [3.0, 3.0]  # 1 + 2
        assert res["dt.sum"] == 28.0
        assert res["dt.mm"] == (torch.arange(16.0).reshape(4, 4) * 2).tolist()
        assert res["dt.mesh"] == ["spyre", 2]
