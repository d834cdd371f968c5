"""Issue 10: the caching device allocator, pinned host memory, parallel DMA.

Reuse is observed through data_ptr(): a block handed out again has the same
address. "Not yet reusable" is made deterministic with a Gate holding the
stream that used the block. Stats are checked key by key after each step,
against what CUDA's caching allocator would report for the same steps.
"""

import threading

import pytest
import torch
import torch_spyre
from torch_spyre import memory as spyre_memory
from torch_spyre.testing import Gate

from _helpers import build_shared_library, run_threads
from conftest import run_python

KiB = 1 << 10
MiB = 1 << 20
SMALL_SEGMENT = 2 * MiB
LARGE_SEGMENT = 20 * MiB


pytestmark = pytest.mark.usefixtures("empty_device")  # conftest.py


def floats(nbytes, **kwargs):
    return torch.empty(nbytes // 4, device="spyre", **kwargs)


def expect_stats(**expected):
    """Checks memory_stats() keys; `__` in a name stands for `.`."""
    stats = torch.accelerator.memory_stats()
    actual = {name: stats[name.replace("__", ".")] for name in expected}
    assert actual == expected


# ---------------------------------------------------------------- stream-aware reuse


def test_freed_block_is_reused_at_once_by_its_own_stream_only():
    x = floats(MiB)
    ptr = x.data_ptr()
    del x
    y = floats(MiB)
    assert y.data_ptr() == ptr
    del y
    s = torch.spyre.Stream()
    with s:
        z = floats(MiB)  # another stream: a segment of its own
    assert z.data_ptr() != ptr
    expect_stats(num_device_alloc=2, segment__all__current=2)
    z_ptr = z.data_ptr()
    del z
    with s:
        assert floats(MiB).data_ptr() == z_ptr


def test_block_recorded_on_a_gated_stream_is_reused_after_the_gate():
    t = floats(KiB)
    ptr = t.data_ptr()
    s = torch.spyre.Stream()
    gate = Gate()
    gate.block(s)
    t.record_stream(s)
    del t  # records an event on s, behind the gate
    expect_stats(allocated_bytes__all__current=0, active_bytes__all__current=KiB)
    held = [floats(KiB) for _ in range(4)]
    assert ptr not in [h.data_ptr() for h in held]
    del held
    gate.release()
    s.synchronize()
    reused = floats(KiB)  # the allocation finds the event complete
    assert reused.data_ptr() == ptr
    expect_stats(allocated_bytes__all__current=KiB, active_bytes__all__current=KiB)


def test_copy_on_another_stream_records_the_block():
    src = torch.arange(256.0, device="spyre")
    ptr = src.data_ptr()
    dst = torch.empty(256, device="spyre")
    s = torch.spyre.Stream()
    gate = Gate()
    gate.block(s)
    s.wait_stream(torch.spyre.current_stream())  # src and dst are written on the default stream
    with s:
        dst.copy_(src)  # queued on s behind the gate: records src on s
    del src
    overwrite = torch.full((256,), -1.0, device="spyre")  # the default stream, at once
    assert overwrite.data_ptr() != ptr
    gate.release()
    s.synchronize()
    assert dst.cpu().tolist() == list(range(256))
    assert torch.full((256,), -2.0, device="spyre").data_ptr() == ptr


# ---------------------------------------------------------------- splitting and coalescing


def test_small_pool_splits_best_fit_and_coalesces():
    a = floats(KiB)
    base = a.data_ptr()
    expect_stats(
        segment__small_pool__current=1,
        reserved_bytes__small_pool__current=SMALL_SEGMENT,
        allocated_bytes__small_pool__current=KiB,
        inactive_split__small_pool__current=1,
        inactive_split_bytes__small_pool__current=SMALL_SEGMENT - KiB,
        num_device_alloc=1,
    )
    b = floats(KiB)
    c = floats(2 * KiB)
    assert (b.data_ptr(), c.data_ptr()) == (base + KiB, base + 2 * KiB)
    del b  # a hole between a and c: a second inactive split block
    expect_stats(
        allocation__all__current=2,
        allocated_bytes__all__current=3 * KiB,
        active_bytes__all__current=3 * KiB,
        inactive_split__all__current=2,
        inactive_split_bytes__all__current=SMALL_SEGMENT - 3 * KiB,
    )
    d = floats(KiB)  # the best fit is the hole, not the segment's tail
    assert d.data_ptr() == base + KiB
    e = floats(100)  # rounded up to 512 bytes, after c
    assert e.data_ptr() == base + 4 * KiB
    expect_stats(
        allocated_bytes__all__current=4 * KiB + 512,
        requested_bytes__all__current=4 * KiB + 100,
        inactive_split__all__current=1,
        inactive_split_bytes__all__current=SMALL_SEGMENT - 4 * KiB - 512,
    )
    del c, d, e  # merge into one free block behind a
    expect_stats(
        allocation__all__current=1,
        inactive_split__all__current=1,
        inactive_split_bytes__all__current=SMALL_SEGMENT - KiB,
    )
    del a  # the whole segment is one free block again: no split left
    expect_stats(
        allocated_bytes__all__current=0,
        active_bytes__all__current=0,
        requested_bytes__all__current=0,
        inactive_split__all__current=0,
        inactive_split_bytes__all__current=0,
        reserved_bytes__all__current=SMALL_SEGMENT,
        num_device_free=0,
    )
    torch.accelerator.empty_cache()
    expect_stats(segment__all__current=0, reserved_bytes__all__current=0, num_device_free=1)


def test_splits_reuse_the_block_objects_merges_gave_back():
    # A loop over new sizes splits a block off a segment's free tail and merges
    # it back at every step: after the first, no block object is allocated.
    made = torch_spyre._C._block_objects_made
    a = floats(KiB)
    b = floats(KiB)
    del b  # merged into the free tail behind a: its object is kept
    start = made()
    for n in range(1, 50):
        t = floats(512 * n)
        assert t.data_ptr() == a.data_ptr() + KiB
        del t
    assert made() == start
    expect_stats(
        allocation__all__current=1,
        inactive_split__all__current=1,
        inactive_split_bytes__all__current=SMALL_SEGMENT - KiB,
    )


def test_large_pool_splits_only_a_rest_above_1_mib():
    a = torch.empty(3 * MiB // 2, dtype=torch.uint8, device="spyre")  # a 20 MiB segment
    base = a.data_ptr()
    b = torch.empty(18 * MiB, dtype=torch.uint8, device="spyre")
    # The rest after b is 512 KiB: too small for the large pool, so b gets it too.
    assert b.data_ptr() == base + 3 * MiB // 2
    expect_stats(
        segment__large_pool__current=1,
        reserved_bytes__large_pool__current=LARGE_SEGMENT,
        allocated_bytes__large_pool__current=LARGE_SEGMENT,
        requested_bytes__large_pool__current=3 * MiB // 2 + 18 * MiB,
        inactive_split__large_pool__current=0,
        allocation__small_pool__current=0,
    )
    del a
    expect_stats(inactive_split__large_pool__current=1,
                 inactive_split_bytes__large_pool__current=3 * MiB // 2)
    big = torch.empty(11 * MiB, dtype=torch.uint8, device="spyre")  # >= 10 MiB: its own size
    expect_stats(reserved_bytes__large_pool__current=LARGE_SEGMENT + 12 * MiB)
    del b, big
    torch.accelerator.empty_cache()
    expect_stats(reserved_bytes__all__current=0, num_device_free=2)


def test_peaks_and_resets_follow_cuda():
    torch.accelerator.reset_peak_memory_stats()
    torch.accelerator.reset_accumulated_memory_stats()
    x = floats(MiB)
    del x
    y = floats(KiB)
    expect_stats(
        allocated_bytes__all__peak=MiB,
        allocated_bytes__all__allocated=MiB + KiB,
        allocated_bytes__all__freed=MiB,
        allocation__all__allocated=2,
        reserved_bytes__all__peak=SMALL_SEGMENT,
        num_device_alloc=1,
    )
    torch.accelerator.reset_peak_memory_stats()
    expect_stats(allocated_bytes__all__peak=KiB, reserved_bytes__all__peak=SMALL_SEGMENT)
    assert torch.accelerator.max_memory_allocated() == KiB
    torch.accelerator.reset_accumulated_memory_stats()
    expect_stats(allocated_bytes__all__allocated=0, num_device_alloc=0, num_alloc_retries=0)
    del y


def test_empty_cache_waits_for_pending_frees_and_keeps_segments_in_use():
    kept = floats(KiB)
    busy, reader = torch.spyre.Stream(), torch.spyre.Stream()
    with busy:
        own = floats(4 * MiB)  # busy's pool: a 20 MiB segment
        torch.spyre._sleep(200)  # queued before the free: may still use `own`
    recorded = floats(4 * KiB)
    with reader:
        torch.spyre._sleep(200)
    recorded.record_stream(reader)
    slept = [busy.record_event(), reader.record_event()]
    del own, recorded  # an event on reader; busy's segment waits for busy
    torch.accelerator.empty_cache()
    assert all(e.query() for e in slept), "empty_cache returned before the streams ran"
    expect_stats(
        segment__all__current=1,
        reserved_bytes__all__current=SMALL_SEGMENT,
        active_bytes__all__current=KiB,
        num_sync_all_streams=1,
        num_device_free=1,
    )
    del kept


# ---------------------------------------------------------------- out of memory


def test_failed_allocation_releases_the_cache_and_retries():
    proc = run_python(
        """
        import torch
        a = torch.empty(256, device="spyre")  # default stream: a 2 MiB segment
        s, s2 = torch.spyre.Stream(), torch.spyre.Stream()
        with s:
            b = torch.empty(256, device="spyre")  # s: another 2 MiB segment
        del b  # cached for s: the 4 MiB device is full
        assert torch.accelerator.memory_reserved() == 4 * 2**20
        with s2:
            c = torch.empty(256, device="spyre")  # fails, frees s's segment, retries
        stats = torch.accelerator.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0, stats
        assert stats["num_device_free"] == 1 and stats["num_device_alloc"] == 3, stats
        try:
            torch.empty(300000, device="spyre")  # 20 MiB segment: never fits
        except torch.OutOfMemoryError as e:
            message = str(e)
        else:
            raise AssertionError("no error")
        assert "tried to allocate 1200000 bytes (a segment of 20971520 bytes)" in message, message
        assert "the device has 4194304 bytes in total, 0 free" in message, message
        assert "PyTorch holds 2048 bytes in tensors and 4194304 bytes reserved" in message, message
        stats = torch.accelerator.memory_stats()
        assert stats["num_alloc_retries"] == 2 and stats["num_ooms"] == 1, stats
        assert torch.accelerator.memory_allocated() == 2048
        print("ok")
        """,
        env={"FLEX_STUB_MEMORY_BYTES": str(4 * MiB)},
    )
    assert proc.stdout.strip() == "ok"


# ---------------------------------------------------------------- pinned host memory


def test_pinned_block_used_by_a_gated_copy_is_not_reused_until_it_ran():
    host = torch.arange(1024.0).pin_memory()
    ptr = host.data_ptr()
    dst = torch.empty(1024, device="spyre")
    s = torch.spyre.Stream()
    with s, Gate() as gate:
        gate.block()
        dst.copy_(host, non_blocking=True)  # returns at once; the copy waits at the gate
        del host
        others = [torch.empty(1024, pin_memory=True) for _ in range(3)]
        assert ptr not in [o.data_ptr() for o in others]
        for other in others:
            other.fill_(-1.0)  # would corrupt the queued copy if it shared the block
        stats = torch.spyre.host_memory_stats()
        assert stats["active_requests.current"] == 4  # three live, one waiting for s
        gate.release()
        s.synchronize()
    assert dst.cpu().tolist() == [float(i) for i in range(1024)]
    del others
    assert torch.empty(1024, pin_memory=True).data_ptr() == ptr  # its event completed


def test_pinned_destination_of_a_gated_d2h_is_not_reused_until_it_ran():
    src = torch.arange(1024.0, device="spyre")
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())
    with s, Gate() as gate:
        gate.block()
        host = torch.empty(1024, pin_memory=True)
        ptr = host.data_ptr()
        host.copy_(src, non_blocking=True)
        del host
        assert torch.empty(1024, pin_memory=True).data_ptr() != ptr
        gate.release()
        s.synchronize()


def test_non_blocking_d2h_returns_pinned_memory_without_waiting():
    want = torch.randn(16 * MiB // 4)  # 16 MiB: split across the DMA engines
    src = want.to("spyre")
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())
    with s, Gate() as gate:
        gate.block()
        host = src.to("cpu", non_blocking=True)
        assert host.is_pinned() and not s.query()
        gate.release()
        s.synchronize()
    assert torch.equal(host, want)


def test_pin_memory_is_pinned_and_empty_host_cache_returns_free_blocks():
    torch.spyre.reset_accumulated_host_memory_stats()
    pinned = torch.arange(10.0).pin_memory()
    assert pinned.is_pinned() and pinned[3:].is_pinned() and not torch.arange(3.0).is_pinned()
    dropped = torch.empty(1000, pin_memory=True)
    dropped_ptr = dropped.data_ptr()
    del dropped
    stats = torch.spyre.host_memory_stats()
    assert stats["allocations.current"] == 2 and stats["num_host_alloc"] == 2
    assert stats["active_requests.current"] == 1
    assert stats["allocated_bytes.current"] == 64 + 4096  # sizes rounded up to powers of two
    assert torch.empty(1000, pin_memory=True).data_ptr() == dropped_ptr  # cached, reused
    torch.accelerator.empty_host_cache()
    stats = torch.spyre.host_memory_stats()
    assert stats["allocations.current"] == 1 and stats["num_host_free"] == 1
    assert torch.equal(pinned, torch.arange(10.0))


# ---------------------------------------------------------------- parallel DMA


def test_parallel_dma_keeps_each_stream_in_order():
    proc = run_python(
        """
        import torch
        n = 8 * 2**20  # 32 MiB of float32: every copy is split across the DMA engines
        first, second = torch.spyre.Stream(), torch.spyre.Stream()
        lanes = []
        for i, stream in enumerate((first, second)):
            older = torch.full((n,), float(i)).pin_memory()
            newer = torch.arange(n, dtype=torch.float32).add_(i).pin_memory()
            with stream:
                dev = torch.empty(n, device="spyre")
                dev.copy_(older, non_blocking=True)
                dev.copy_(newer, non_blocking=True)  # lands after `older`
                copy = torch.empty(n, device="spyre")
                copy.copy_(dev)  # D2D after both
                back = torch.empty(n, pin_memory=True)
                back.copy_(copy, non_blocking=True)
            lanes.append((stream, newer, dev, back))
        # The second stream reads the first's result once an event says it is there.
        done = torch.spyre.Event()
        done.record(first)
        second.wait_event(done)
        with second:
            crossed = torch.empty(n, pin_memory=True)
            crossed.copy_(lanes[0][2], non_blocking=True)
        lanes[0][2].record_stream(second)
        torch.spyre.synchronize()
        for stream, newer, dev, back in lanes:
            assert torch.equal(back, newer)
        assert torch.equal(crossed, lanes[0][1])
        threads = len(__import__("os").listdir("/proc/self/task"))
        print("ok", threads)
        """,
        env={"FLEX_STUB_DMA_ENGINES": "4"},
    )
    status, threads = proc.stdout.split()
    assert status == "ok"
    # Python's threads, an engine per stream and three DMA workers.
    assert int(threads) >= 3 + 2


# ---------------------------------------------------------------- threads


def test_threads_allocating_copying_and_freeing_on_their_own_streams():
    # Frees also happen on engine threads (tensors captured by queued copies);
    # every value read back must be the one written, and nothing may leak.
    errors = []

    def worker(seed):
        try:
            stream = torch.spyre.Stream()
            with stream:
                for step in range(60):
                    n = 1 + (seed * 7919 + step * 104729) % (600 * KiB)
                    host = torch.full((n,), float(seed * 1000 + step)).pin_memory()
                    dev = host.to("spyre", non_blocking=True)
                    other = torch.empty_like(dev)
                    other.copy_(dev)
                    back = other.to("cpu", non_blocking=True)
                    del host, dev, other
                    stream.synchronize()
                    if not bool((back == seed * 1000 + step).all()):
                        errors.append((seed, step))
        except Exception as e:  # reported below: a thread's exception is otherwise lost
            errors.append(repr(e))

    run_threads(worker, [(i,) for i in range(4)])
    assert errors == []
    torch.spyre.synchronize()
    torch.accelerator.empty_cache()
    expect_stats(allocated_bytes__all__current=0, active_bytes__all__current=0,
                 reserved_bytes__all__current=0, inactive_split__all__current=0)


def test_frees_without_the_lock_are_seen_by_every_reader_at_once():
    # free() of a block used on its allocation stream only takes no lock: the
    # next call that takes it (an allocation, the stats, a snapshot) first
    # returns such blocks to their pools. Nothing may tell the difference.
    x, y = floats(MiB), floats(KiB)
    x_ptr = x.data_ptr()
    del x
    expect_stats(allocated_bytes__all__current=KiB, allocated_bytes__all__freed=MiB,
                 active__all__current=1, inactive_split__all__current=2)
    blocks = [b for seg in spyre_memory._snapshot()["segments"] for b in seg["blocks"]]
    assert [(b["size"], b["state"]) for b in blocks] == [
        (MiB, "inactive"), (KiB, "active_allocated"), (SMALL_SEGMENT - MiB - KiB, "inactive")]
    del y
    assert floats(MiB).data_ptr() == x_ptr  # the merged segment's first block again


def test_a_freed_block_goes_to_the_next_allocation_of_its_size_and_is_counted_as_cuda_counts():
    # The latest block freed without the lock waits in a slot: the next allocation on
    # its stream asking for the same size takes it back without the lock. The stats
    # count a free and an allocation, as if both had taken the lock.
    torch.accelerator.reset_peak_memory_stats()
    keep = floats(KiB)
    x = floats(3 * KiB)
    ptr = x.data_ptr()
    for _ in range(5):
        del x
        x = floats(3 * KiB)
        assert x.data_ptr() == ptr
    expect_stats(allocation__all__allocated=7, allocation__all__freed=5,
                 allocation__all__current=2, allocation__small_pool__allocated=7,
                 allocated_bytes__all__allocated=KiB + 18 * KiB,
                 allocated_bytes__all__freed=15 * KiB, allocated_bytes__all__current=4 * KiB,
                 allocated_bytes__all__peak=4 * KiB, allocated_bytes__small_pool__freed=15 * KiB,
                 active__all__allocated=7, active__all__freed=5, active_bytes__all__freed=15 * KiB,
                 requested_bytes__all__allocated=KiB + 18 * KiB,
                 requested_bytes__all__freed=15 * KiB, inactive_split__all__current=1,
                 segment__all__current=1, num_device_alloc=1)
    del x, keep
    expect_stats(allocation__all__current=0, allocated_bytes__all__current=0,
                 inactive_split__all__current=0, allocated_bytes__all__freed=19 * KiB)


def test_a_freed_block_another_request_does_not_fit_returns_to_its_pool():
    x = floats(KiB)
    ptr = x.data_ptr()
    del x
    y = floats(2 * KiB)  # another size: the block merges back, best fit as before
    assert y.data_ptr() == ptr
    del y
    s = torch.spyre.Stream()
    with s:
        z = floats(2 * KiB)  # another stream: a segment of its own
    assert z.data_ptr() != ptr
    assert floats(2 * KiB).data_ptr() == ptr
    del z
    expect_stats(allocation__all__current=0, allocated_bytes__all__current=0,
                 allocation__all__allocated=4, allocation__all__freed=4,
                 inactive_split__all__current=0, segment__all__current=2)


def test_same_sized_allocations_and_frees_from_two_threads_never_share_a_block():
    # Two threads free and allocate blocks of one size on their own streams: each
    # block has one owner at a time (a block handed out twice would show the other
    # thread's values), and the stats count every allocation and free.
    rounds, live = 400, 3
    errors = []
    barrier = threading.Barrier(2)

    def worker(seed):
        try:
            stream = torch.spyre.Stream()
            held = []
            barrier.wait()
            with stream:
                for step in range(rounds):
                    value = float(seed * 100000 + step)
                    held.append((value, torch.full((256,), value, device="spyre")))
                    if len(held) > live:
                        held.pop(0)
                    if step % 50 == 49:
                        for v, t in held:
                            if t.cpu().tolist() != [v] * 256:
                                errors.append((seed, step, v))
            del held
            stream.synchronize()
        except Exception as e:  # reported below: a thread's exception is otherwise lost
            errors.append(repr(e))

    run_threads(worker, [(i,) for i in range(2)], timeout=120)
    assert errors == []
    expect_stats(allocation__all__allocated=2 * rounds, allocation__all__freed=2 * rounds,
                 allocated_bytes__all__allocated=2 * rounds * KiB,
                 allocated_bytes__all__current=0, active__all__current=0,
                 inactive_split__all__current=0)


def test_frees_from_many_threads_merge_back_into_whole_segments():
    # Blocks freed concurrently without the lock, in any order, are merged with
    # their neighbours as the locked frees were: the segments end whole.
    sizes = [(1 + (i * 7919) % 97) * KiB for i in range(400)]
    tensors = [floats(n) for n in sizes]
    reserved = torch.accelerator.memory_reserved()
    barrier = threading.Barrier(2)

    def drop(own):
        barrier.wait()
        own.clear()

    halves = [tensors[0::2], tensors[1::2]]
    del tensors
    run_threads(drop, [(half,) for half in halves])
    expect_stats(allocated_bytes__all__current=0, active_bytes__all__current=0,
                 inactive_split__all__current=0, inactive_split_bytes__all__current=0,
                 allocation__all__freed=400)
    assert torch.accelerator.memory_reserved() == reserved
    assert all(len(seg["blocks"]) == 1 for seg in spyre_memory._snapshot()["segments"])


FAILING_NEW = """
    // operator new that throws std::bad_alloc on a thread while switched on.
    #include <cstdlib>
    #include <new>
    static thread_local int failing = 0;
    extern "C" void corners_fail_allocations(int on) { failing = on; }
    void* operator new(std::size_t n) {
      if (failing) throw std::bad_alloc();
      if (void* p = std::malloc(n ? n : 1)) return p;
      throw std::bad_alloc();
    }
    void* operator new[](std::size_t n) { return operator new(n); }
    void operator delete(void* p) noexcept { std::free(p); }
    void operator delete[](void* p) noexcept { std::free(p); }
    void operator delete(void* p, std::size_t) noexcept { std::free(p); }
    void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
"""


def test_free_survives_an_allocation_failure_and_the_block_returns_later(tmp_path):
    lib = build_shared_library(tmp_path, "failing_new", FAILING_NEW)
    proc = run_python("""
        import ctypes, torch
        from torch_spyre.testing import Gate
        fail = ctypes.CDLL(None).corners_fail_allocations
        stats = lambda: torch.spyre.memory_stats()
        s = torch.spyre.Stream()
        x = torch.ones(256, device="spyre")  # one 1024-byte block of the default stream
        x_ptr = x.data_ptr()
        s.wait_stream(torch.spyre.current_stream())
        gate = Gate()
        gate.block(s)
        with torch.spyre.stream(s):
            y = x * 2  # x's block is used on s, queued behind the gate
        before = stats()
        fail(1)
        del x  # free() needs an event on s: no memory for it
        fail(0)
        after = stats()
        print(before["allocated_bytes.all.current"] - after["allocated_bytes.all.current"],
              before["active_bytes.all.current"] - after["active_bytes.all.current"])
        gate.release()
        s.synchronize()
        # The next allocation records the deferred free's event on s; the block
        # returns to its pool once that event completes (at once, or by the
        # allocation after the synchronize), and is reused.
        z = torch.empty(256, device="spyre")
        torch.spyre.synchronize()
        w = torch.empty(256, device="spyre")
        print(x_ptr in (z.data_ptr(), w.data_ptr()), y.cpu().tolist() == [2.0] * 256,
              stats()["active_bytes.all.current"] - before["active_bytes.all.current"])
    """, env={"LD_PRELOAD": str(lib)})
    assert proc.stdout.splitlines() == ["1024 0", "True True 1024"]
