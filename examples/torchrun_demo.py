"""A tiny data-parallel training run: one process per device, DDP over spyreccl.

    torchrun --standalone --nproc-per-node=2 examples/torchrun_demo.py

torchrun sets LOCAL_RANK, so rank r runs on spyre:r without calling set_device.
Every rank builds the same model (same seed), trains it with
DistributedDataParallel on its own slice of each batch, and prints its loss per
step; DDP averages the gradients across ranks (spyreccl stages them through
host memory and gloo moves the bytes), so every rank ends with the same
parameters: the checksum printed at the end is the same on every rank.
"""

import sys

import torch
import torch.distributed as dist
from torch import nn


def say(line: str) -> None:
    # One write with its newline: the ranks share the terminal.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(steps=5, batch=8, lr=0.05):
    dist.init_process_group()  # spyre tensors: spyreccl, CPU tensors: gloo
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("spyre", torch.spyre.current_device())

    torch.manual_seed(0)  # the same initial parameters on every rank
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    ddp = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)

    # A fixed regression batch; rank r trains on rows r*batch .. (r+1)*batch-1.
    data = torch.Generator().manual_seed(1)
    x = torch.randn(world * batch, 16, generator=data)
    y = x @ torch.randn(16, 4, generator=data) / 4
    mine = slice(rank * batch, (rank + 1) * batch)
    x, y = x[mine].to(device), y[mine].to(device)
    for step in range(1, steps + 1):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # the gradient all-reduces overlap the rest of backward
        optimizer.step()
        say(f"rank {rank}/{world} on {device}: step {step} loss {loss.item():.6f}")

    checksum = sum(p.detach().double().sum() for p in model.parameters()).item()
    say(f"rank {rank}/{world} on {device}: parameter checksum {checksum:.10f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
