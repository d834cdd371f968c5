"""Issue 17: the rows of docs/support.md that no other test file covers, including
the current state of features that do not work yet (so a change shows up here)."""

import copy

import pytest
import torch
from torch import nn

from conftest import run_python
from _helpers import rank_results, torchrun


def raise_fresh(fn):
    """fn(), re-raising a NotImplementedError with a new traceback: pytest keeps an
    xfailed test's traceback, and the original's frames hold spyre tensors."""
    try:
        return fn()
    except NotImplementedError as e:
        message = str(e)
    raise NotImplementedError(message)


def test_dataloader_pin_memory_feeds_non_blocking_copies():
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, pin_memory=True)
    batches = []
    for (batch,) in loader:  # pinned by the accelerator's (spyre's) host allocator
        assert batch.is_pinned()
        batches.append(batch.to("spyre", non_blocking=True))
    torch.spyre.synchronize()
    assert [b.cpu().tolist() for b in batches] == [[[0.0, 1.0], [2.0, 3.0]],
                                                    [[4.0, 5.0], [6.0, 7.0]]]


def test_profiler_records_spyre_ops_and_their_device_activities():
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        (torch.ones(4, device="spyre") + 1).cpu()
    names = {event.key for event in prof.key_averages()}
    assert {"aten::ones", "aten::add", "aten::_copy_from"} <= names
    # Host events and the device work they launched (test_profiler.py has the rest).
    assert {event.device_type for event in prof.events()} == {
        torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.PrivateUse1}


def test_activation_checkpointing():
    torch.manual_seed(0)
    layer = nn.Linear(3, 3)
    x = torch.arange(6.0).reshape(2, 3)
    layer(x).square().sum().backward()
    expected = layer.weight.grad.clone()
    layer.weight.grad = None
    spyre_layer = layer.to("spyre")
    out = torch.utils.checkpoint.checkpoint(spyre_layer, x.to("spyre"), use_reentrant=False)
    out.square().sum().backward()
    assert torch.equal(spyre_layer.weight.grad.cpu(), expected)


@pytest.mark.slow  # a torchrun job
def test_fsdp2_training_step_on_two_ranks(tmp_path):
    torchrun(tmp_path, """
        import json, os
        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group()  # spyreccl for spyre tensors
        mesh = init_device_mesh("spyre", (2,))
        net = nn.Linear(4, 2, bias=False)
        with torch.no_grad():
            net.weight.copy_(torch.arange(8.0).reshape(2, 4))  # integers: exact arithmetic
        net.to("spyre")
        fully_shard(net, mesh=mesh)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
        x = torch.full((1, 4), float(rank + 1), device="spyre")
        net(x).sum().backward()
        optimizer.step()
        shard = net.weight.to_local().cpu().tolist()
        full = net.weight.full_tensor().cpu().tolist()  # a functional all-gather
        with open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}.json"), "w") as f:
            json.dump({"type": type(net.weight).__name__, "shard": shard, "full": full}, f)
        dist.destroy_process_group()
        """)
    # Mean gradient over ranks: every weight gets (1 + 2) / 2 = 1.5; 0.5 * 1.5 = 0.75 off.
    full = [[v - 0.75 for v in range(4 * r, 4 * r + 4)] for r in range(2)]
    assert rank_results(tmp_path) == [
        {"type": "DTensor", "shard": [full[r]], "full": full} for r in range(2)
    ]


def test_ddp_trains_in_one_process():
    # The 2-rank configurations are in test_ddp.py; here: one rank, DDP's
    # gradient equals the plain module's.
    proc = run_python(
        """
        import tempfile, torch
        import torch.distributed as dist
        from torch import nn
        dist.init_process_group("spyreccl", init_method="file://" + tempfile.mktemp(),
                                rank=0, world_size=1)
        torch.manual_seed(0)
        layer = nn.Linear(4, 2)
        x = torch.arange(12.0).reshape(3, 4)
        layer(x).sum().backward()
        ddp = nn.parallel.DistributedDataParallel(nn.Linear(4, 2).to("spyre"))
        ddp.module.load_state_dict(layer.state_dict())
        ddp(x.to("spyre")).sum().backward()
        print(torch.equal(ddp.module.weight.grad.cpu(), layer.weight.grad))
        dist.destroy_process_group()
        """
    )
    assert proc.stdout.splitlines() == ["True"]


def test_sparse_tensors_are_not_supported_yet():
    with pytest.raises(NotImplementedError, match=r"^Could not run "
                       r"'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments from the "
                       r"'Sparsespyre' backend"):
        torch.ones(3).to_sparse().to("spyre")


def test_convolution():
    conv = nn.Conv2d(1, 1, 3)
    x = torch.arange(16.0).reshape(1, 1, 4, 4)
    expected = conv(x)
    got = raise_fresh(lambda: copy.deepcopy(conv).to("spyre")(x.to("spyre")).cpu())
    assert torch.equal(got, expected)
