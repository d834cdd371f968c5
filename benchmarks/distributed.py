"""spyreccl against gloo on CPU tensors, and DDP's backward overlap (docs/performance.md).

    torchrun --standalone --nproc-per-node=2 benchmarks/distributed.py [--quick] [--json out.json]

Two ranks, one process group (spyreccl serves CPU tensors through its gloo
group, so the reference runs in the same job). Each row alternates ours and the
reference (A B A B ...) and reports medians; rank 0 prints the table.

Rows:
- dist.all_reduce_64mib: all_reduce of 64 MiB float32, spyre tensors / CPU tensors.
- dist.ddp_step_mlp4: one DDP training step (forward, backward, SGD) of a 4-layer
  MLP, on spyre / on CPU.
- dist.ddp_backward_overlap: how much of the gradient all-reduce DDP hides behind
  the backward pass on spyre: (backward alone + all-reduce alone - DDP backward)
  / min(backward alone, all-reduce alone); 1.0 hides it completely, 0.0 not at all.
"""

import argparse
import json
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn


def timed(fn, sync):
    dist.barrier()  # both ranks start together
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def spyre_sync():
    torch.spyre.synchronize()


def cpu_sync():
    pass


def alternate(ours, ref, repeats):
    a, b = [], []
    for _ in range(repeats):
        a.append(ours())
        b.append(ref())
    return statistics.median(a), statistics.median(b)


def mlp(device, width):
    torch.manual_seed(0)
    layers = []
    for _ in range(4):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers[:-1]).to(device)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="short loops (proves the code runs)")
    parser.add_argument("--json", help="write the rows here (rank 0)")
    args = parser.parse_args()
    repeats = 2 if args.quick else 7
    dist.init_process_group()
    rank = dist.get_rank()
    dev = torch.device("spyre", torch.spyre.current_device())
    rows = {}

    # all_reduce of 64 MiB float32.
    n = (4 if args.quick else 64) * 2**20 // 4
    t_dev, t_cpu = torch.ones(n, device=dev), torch.ones(n)
    ours, ref = alternate(lambda: timed(lambda: dist.all_reduce(t_dev), spyre_sync),
                          lambda: timed(lambda: dist.all_reduce(t_cpu), cpu_sync), repeats)
    rows["dist.all_reduce_64mib"] = dict(ours=ours * 1e3, ref=ref * 1e3, target=1.3)

    # A DDP step of a 4-layer MLP.
    width, batch = (128, 16) if args.quick else (512, 64)
    steps = {}
    for name, device, sync in (("spyre", dev, spyre_sync), ("cpu", torch.device("cpu"), cpu_sync)):
        model = nn.parallel.DistributedDataParallel(mlp(device, width))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(batch, width).to(device)

        def step(model=model, opt=opt, x=x):
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()

        step()  # warm up (buckets are rebuilt after the first step)
        steps[name] = (step, sync)
    ours, ref = alternate(lambda: timed(*steps["spyre"]), lambda: timed(*steps["cpu"]), repeats)
    rows["dist.ddp_step_mlp4"] = dict(ours=ours * 1e3, ref=ref * 1e3, target=1.5)

    # Overlap: DDP's backward against its two halves measured alone.
    local = mlp(dev, width)
    ddp = nn.parallel.DistributedDataParallel(mlp(dev, width))
    x = torch.randn(batch, width, device=dev)
    grads = [torch.ones_like(p) for p in local.parameters()]

    def backward(module):
        return lambda: module(x).square().mean().backward()

    def all_reduce_grads():
        works = [dist.all_reduce(g, async_op=True) for g in grads]
        for w in works:
            w.wait()

    backward(ddp)()
    t_ddp = statistics.median(timed(backward(ddp), spyre_sync) for _ in range(repeats))
    t_local = statistics.median(timed(backward(local), spyre_sync) for _ in range(repeats))
    t_comm = statistics.median(timed(all_reduce_grads, spyre_sync) for _ in range(repeats))
    hidden = (t_local + t_comm - t_ddp) / min(t_local, t_comm)
    rows["dist.ddp_backward_overlap"] = dict(
        ours=t_ddp * 1e3, ref=(t_local + t_comm) * 1e3, overlap=round(hidden, 3),
        backward_ms=t_local * 1e3, all_reduce_ms=t_comm * 1e3)

    if rank == 0:
        for name, row in rows.items():
            row["ratio"] = row["ours"] / row["ref"]
            verdict = ""
            if "target" in row:
                verdict = f"target <= {row['target']}x: {'PASS' if row['ratio'] <= row['target'] else 'MISS'}"
            else:
                verdict = f"overlap {row['overlap']:.2f}"
            sys.stdout.write(f"{name}: {row['ours']:.2f} ms / {row['ref']:.2f} ms = "
                             f"{row['ratio']:.2f}x  {verdict}\n")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
