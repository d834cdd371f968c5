"""One process per device: each rank works on its own streams, then all-reduces.

    torchrun --standalone --nproc-per-node=2 examples/torchrun_demo.py

torchrun sets LOCAL_RANK, so rank r runs on spyre:r without calling set_device.
Each rank splits its chunks over two streams (the "kernel" is emulated device
time, so the streams overlap), joins them with events, and the ranks all-reduce
the result with the default process group (gloo for CPU tensors, spyreccl for
spyre tensors).
"""

import sys
import time

import torch
import torch.distributed as dist


def main(chunks=4, width=4, kernel_ms=50.0):
    dist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("spyre", torch.spyre.current_device())

    streams = [torch.spyre.Stream(), torch.spyre.Stream()]
    done = [torch.spyre.Event() for _ in streams]
    # Rank r's chunk i holds r * chunks + i: the all-reduced sum is known exactly.
    data = torch.arange(world * chunks, dtype=torch.float32).reshape(world, chunks)[rank]
    start = time.perf_counter()
    partial = [None] * chunks
    for i in range(chunks):
        with torch.spyre.stream(streams[i % 2]):
            # The chunk's "kernel", then its result (twice the chunk): both are
            # enqueued on the stream and the host moves on.
            torch.spyre._sleep(kernel_ms)
            partial[i] = torch.full((width,), 2.0 * float(data[i]), device=device)
    for event, stream in zip(done, streams):
        event.record(stream)
        torch.spyre.current_stream().wait_event(event)
    local = torch.stack(partial).sum(0)  # on the current stream, after both streams

    dist.all_reduce(local)
    result = local.cpu()
    elapsed = time.perf_counter() - start

    expected = 2.0 * sum(range(world * chunks))
    assert result.device.type == "cpu" and local.device == device
    assert torch.equal(result, torch.full((width,), expected)), result
    line = (
        f"rank {rank}/{world} on {local.device}: {chunks} chunks on streams "
        f"{[s.stream_id for s in streams]}, all_reduce(sum) = {result[0].item():g} "
        f"(expected {expected:g}) in {elapsed * 1e3:.0f} ms\n"
    )
    # One write with its newline: the ranks share the terminal.
    sys.stdout.write(line)
    sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
