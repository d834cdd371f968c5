"""Streams on spyre: the same work on one stream, then split over two streams.

Each chunk's "kernel" is emulated device time (torch.spyre._sleep); work on
different streams overlaps, so two streams finish in about half the time.
"""

import time

import torch


def run(num_streams, chunks=4, kernel_ms=50.0):
    streams = [torch.spyre.Stream() for _ in range(num_streams)]
    data = torch.arange(chunks * 4, dtype=torch.float32).reshape(chunks, 4)
    results = [None] * chunks
    torch.spyre.synchronize()
    start = time.perf_counter()
    for i in range(chunks):
        with torch.spyre.stream(streams[i % num_streams]):
            x = data[i].to("spyre")
            torch.spyre._sleep(kernel_ms)
            results[i] = x * 2
    torch.spyre.synchronize()
    return time.perf_counter() - start, torch.stack([r.cpu() for r in results])


def main():
    one_time, one = run(1)
    two_time, two = run(2)
    assert torch.equal(one, two)
    print(f"1 stream : {one_time * 1e3:6.1f} ms")
    print(f"2 streams: {two_time * 1e3:6.1f} ms  (speed-up {one_time / two_time:.2f}x, same results)")


if __name__ == "__main__":
    main()
