"""Issue 5: tensors on spyre that respect streams: the allocator and its stats,
pinned memory, stream-ordered copies, compute on streams, RNG and bad input.

Asynchronous behaviour is observed deterministically with a Gate: work behind
it cannot run until the test releases it. "Not there yet" is read either from
pinned host memory directly or from the device through another (ungated)
stream. Where a call must block until gated work has run, a helper thread
releases the gate and the test checks the call returned only after that.
"""

import gc
import threading
import time
import warnings

import pytest
import torch
import torch_spyre
from torch_spyre.testing import Gate

from conftest import run_python

SPYRE = torch.device("spyre:0")

# Every dtype CPU tensors support that the device accepts, and values each
# holds exactly.
DTYPES = [
    torch.float32,
    torch.float16,
    torch.float64,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]


def sample(dtype, shape=(3, 4)):
    """Distinct, exactly representable values of `dtype` (CPU, contiguous)."""
    n = 1
    for size in shape:
        n *= size
    values = torch.arange(n).reshape(shape)
    if dtype == torch.bool:
        return (values % 3 == 0).to(dtype)
    if dtype == torch.uint8:
        return (values * 7 % 251).to(dtype)
    if dtype.is_complex:
        return torch.complex(values - 5.5, 0.25 * values).to(dtype)
    if dtype.is_floating_point:
        return ((values - 5) * 0.5).to(dtype)
    return (values * 3 - 17).to(dtype)


class ReleaseLater:
    """Releases `gate` from a helper thread once another thread is blocked in a
    runtime wait (an observable condition), or after `delay` s at the latest;
    `released` is set just before. A call that must block therefore returns
    only after the release; one that must not returns before it."""

    def __init__(self, gate, delay=10.0):
        self.released = threading.Event()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._release, args=(gate, delay))
        self._thread.start()

    def _release(self, gate, delay):
        deadline = time.monotonic() + delay
        while torch_spyre._C._threads_in_host_waits() < 1 and time.monotonic() < deadline:
            if self._cancelled.wait(0.001):
                return
        self.released.set()
        gate.release()

    def is_set(self):
        return self.released.is_set()

    def cancel(self):
        self._cancelled.set()
        self._thread.join()


def read_on_other_stream(tensor):
    """The tensor's device contents as an ungated stream sees them right now."""
    with torch.spyre.Stream():
        return tensor.cpu()


pytestmark = pytest.mark.usefixtures("drained_device")  # conftest.py


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips(dtype):
    cpu = sample(dtype)
    on_device = cpu.to("spyre")
    assert on_device.device == SPYRE and on_device.dtype == dtype and on_device.is_spyre
    assert on_device.shape == (3, 4) and on_device.stride() == (4, 1)
    back = on_device.cpu()
    assert back.device.type == "cpu" and back.dtype == dtype
    assert torch.equal(back, cpu)
    assert torch.equal(on_device.clone().cpu(), cpu)  # D2D too


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_device_fills_store_what_cpu_stores(dtype):
    value = True if dtype == torch.bool else (2.5 - 1j if dtype.is_complex else 3)
    for make in (torch.zeros, torch.ones):
        assert torch.equal(make(2, 3, dtype=dtype, device="spyre").cpu(), make(2, 3, dtype=dtype))
    full = torch.full((2, 3), value, dtype=dtype, device="spyre")
    assert torch.equal(full.cpu(), torch.full((2, 3), value, dtype=dtype))
    # A non-dense target takes the element-wise path.
    base = torch.zeros(4, 6, dtype=dtype, device="spyre")
    base[:, ::2].fill_(value)
    expected = torch.zeros(4, 6, dtype=dtype)
    expected[:, ::2].fill_(value)
    assert torch.equal(base.cpu(), expected)


def test_fill_values_are_bit_exact():
    big = 2**53 + 1  # not representable as a double
    assert torch.full((2,), big, dtype=torch.int64, device="spyre").cpu().tolist() == [big, big]
    assert torch.full((2,), -(2**63), dtype=torch.int64, device="spyre").cpu().tolist() == [
        -(2**63)
    ] * 2
    assert torch.zeros(3, dtype=torch.uint8, device="spyre").fill_(-1).cpu().tolist() == [255] * 3
    bits = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
    for dtype, as_bits in bits.items():
        for value in (0.1, -0.0, float("inf"), 65504.0, 1e-8):
            got = torch.full((1,), value, dtype=dtype, device="spyre").cpu()
            want = torch.full((1,), value, dtype=dtype)
            assert torch.equal(got.view(as_bits), want.view(as_bits)), (dtype, value)
    nan = torch.full((1,), float("nan"), device="spyre").cpu()
    assert torch.isnan(nan).all()
    expanded = torch.zeros(4, device="spyre").expand(3, 4)
    expanded.fill_(2.0)  # allowed on CPU too: every element is the same memory
    assert expanded.cpu().tolist() == [[2.0] * 4] * 3


def test_fill_with_a_spyre_scalar_tensor_is_queued_not_waited_for():
    # As CUDA's fill_: a value on the device is broadcast by a stream-ordered copy. A wait
    # would raise in sync debug mode "error" (and never return while the gate is closed).
    value = torch.tensor(2.5, device="spyre")
    x = torch.zeros(2, 3, device="spyre")
    as_int = torch.zeros(3, dtype=torch.int32, device="spyre")
    with Gate() as gate:
        gate.block()
        torch.spyre.set_sync_debug_mode("error")
        try:
            x.fill_(value)
            as_int.fill_(value)  # converted as copy_ converts: 2.5 -> 2
            x[1].fill_(x[0, 1] * 2)  # a value computed on the stream, read only there
        finally:
            torch.spyre.set_sync_debug_mode("default")
    assert x.cpu().tolist() == [[2.5] * 3, [5.0] * 3]
    assert as_int.cpu().tolist() == [2, 2, 2]


def test_fill_with_a_scalar_tensor_of_another_device_reads_it():
    x = torch.zeros(3, device="spyre")
    assert x.fill_(torch.tensor(4.0)).cpu().tolist() == [4.0] * 3  # a CPU value: no device wait
    host = torch.zeros(3)
    assert host.fill_(torch.tensor(1.5, device="spyre")).tolist() == [1.5] * 3  # CPU's fill_
    aliased = torch.arange(4.0, device="spyre")
    aliased.fill_(aliased[2])  # its own element: read before it is overwritten
    assert aliased.cpu().tolist() == [2.0] * 4
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor but got "
                                           "tensor with 1 dimensions."):
        x.fill_(torch.ones(1, device="spyre"))


def test_special_float_values_round_trip_bitwise():
    cpu = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45])
    back = cpu.to("spyre").cpu()
    assert torch.equal(back.view(torch.int32), cpu.view(torch.int32))


# ---------------------------------------------------------------- views and strides


def test_views_alias_device_memory_and_match_cpu():
    cpu = torch.arange(24.0).reshape(4, 6)
    dev = cpu.to("spyre")
    base_ptr = dev.untyped_storage().data_ptr()
    views = {
        "t": lambda x: x.t(),
        "slice_step": lambda x: x[1:, ::2],
        "select": lambda x: x[:, 3],
        "narrow": lambda x: x.narrow(1, 2, 3),
        "view": lambda x: x.view(2, 12),
        "reshape": lambda x: x.reshape(3, 8),
        "permute": lambda x: x.view(2, 2, 6).permute(2, 0, 1),
        "unsqueeze": lambda x: x.unsqueeze(1),
        "expand": lambda x: x[:1].expand(5, 6),
        "diagonal": lambda x: x.diagonal(),
        "unfold": lambda x: x.unfold(1, 2, 2),
        "as_strided": lambda x: x.as_strided((2, 2), (7, 1), 1),
        "flatten": lambda x: x.flatten(),
    }
    for name, make in views.items():
        got, want = make(dev), make(cpu)
        assert got.untyped_storage().data_ptr() == base_ptr, name
        assert (got.shape, got.stride(), got.storage_offset()) == (
            want.shape,
            want.stride(),
            want.storage_offset(),
        ), name
        assert torch.equal(got.cpu(), want), name


def test_writes_through_views_reach_the_base():
    dev = torch.zeros(3, 4, device="spyre")
    dev[:, 1].fill_(7)
    dev.t()[3].copy_(torch.tensor([1.0, 2.0, 3.0]))
    dev[2, ::2] += 5  # an op on a strided view
    expected = torch.zeros(3, 4)
    expected[:, 1] = 7
    expected[:, 3] = torch.tensor([1.0, 2.0, 3.0])
    expected[2, ::2] += 5
    assert torch.equal(dev.cpu(), expected)

    complex_dev = torch.tensor([1 + 2j, 3 - 4j]).to("spyre")
    as_real = torch.view_as_real(complex_dev)
    assert as_real.untyped_storage().data_ptr() == complex_dev.untyped_storage().data_ptr()
    as_real[:, 1].zero_()
    assert complex_dev.cpu().tolist() == [1 + 0j, 3 + 0j]
    assert torch.view_as_complex(as_real).cpu().tolist() == [1 + 0j, 3 + 0j]
    dev.unfold(1, 2, 2)[0, 0].fill_(-1)
    assert dev.cpu()[0, :2].tolist() == [-1.0, -1.0]


# ---------------------------------------------------------------- non-contiguous copies

CPU_SOURCES = {
    "transposed": lambda: torch.arange(12.0).reshape(3, 4).t(),
    "sliced": lambda: torch.arange(40.0)[3::4],
    "expanded": lambda: torch.arange(4.0).expand(3, 4),
    "offset_view": lambda: torch.arange(30.0).reshape(5, 6)[1:4, 2:5],
    "channels_last": lambda: torch.arange(24.0)
    .reshape(1, 2, 3, 4)
    .contiguous(memory_format=torch.channels_last),
}


@pytest.mark.parametrize("name", CPU_SOURCES)
def test_non_contiguous_sources_copy_exactly_in_every_direction(name):
    src = CPU_SOURCES[name]()
    on_device = src.to("spyre")
    assert torch.equal(on_device.cpu(), src)  # H2D then D2H
    # Into an existing non-contiguous device destination and back out of one.
    dst = torch.full(src.shape[::-1], -1.0, device="spyre").permute(
        *reversed(range(src.dim()))
    )
    dst.copy_(src)
    assert torch.equal(dst.cpu(), src)
    host_dst = torch.empty(src.shape[::-1]).permute(*reversed(range(src.dim())))
    host_dst.copy_(dst)  # D2H into a strided host tensor
    assert torch.equal(host_dst, src)
    d2d = torch.empty_like(dst, memory_format=torch.contiguous_format)
    d2d.copy_(dst)  # strided D2D
    assert d2d.is_contiguous() and torch.equal(d2d.cpu(), src)


def test_copies_broadcast_like_cpu_and_reject_other_shapes():
    row = torch.arange(4.0)
    dev = torch.zeros(3, 4, device="spyre").copy_(row)
    assert torch.equal(dev.cpu(), row.expand(3, 4))
    host = torch.zeros(2, 4).copy_(row.to("spyre"))
    assert torch.equal(host, row.expand(2, 4))
    d2d = torch.zeros(2, 4, device="spyre").copy_(row.to("spyre")[None])
    assert torch.equal(d2d.cpu(), row.expand(2, 4))
    before = dev.cpu()
    with pytest.raises(RuntimeError, match=r"source of shape \[12\] cannot be broadcast to the "
                       r"destination's shape \[3, 4\]"):
        dev.copy_(torch.arange(12.0))
    assert torch.equal(dev.cpu(), before)


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d"])
def test_conjugate_and_negative_views_copy_their_values(direction):
    cpu = torch.tensor([1 + 2j, -3 - 4j])
    for make in (torch.conj, torch._neg_view):
        want = make(cpu).resolve_conj().resolve_neg()
        if direction == "h2d":
            got = make(cpu).to("spyre").cpu()
        elif direction == "d2h":
            got = make(cpu.to("spyre")).cpu()
        else:
            got = make(cpu.to("spyre")).clone().resolve_conj().resolve_neg().cpu()
        assert torch.equal(got.resolve_conj().resolve_neg(), want), make
    assert torch.equal(cpu.to("spyre").conj().imag.cpu(), torch.tensor([-2.0, 4.0]))


# ---------------------------------------------------------------- copy directions and blocking


@pytest.mark.races  # reads dst on another stream to show the copy has not run
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_h2d_values_and_blocking_rule(non_blocking, pinned):
    src = sample(torch.float32)
    if pinned:
        src = src.pin_memory()
    dst = torch.full((3, 4), -1.0, device="spyre")
    stream = torch.spyre.Stream()
    gate = Gate()
    with stream:
        gate.block()
        if non_blocking and pinned:
            dst.copy_(src, non_blocking=True)  # returns with the copy still queued
            assert torch.equal(read_on_other_stream(dst), torch.full((3, 4), -1.0))
            gate.release()
            stream.synchronize()
        else:
            releaser = ReleaseLater(gate)
            dst.copy_(src, non_blocking=non_blocking)
            assert releaser.is_set(), "a pageable or blocking copy returned before it ran"
    assert torch.equal(read_on_other_stream(dst), src)


@pytest.mark.races  # reads a pending non_blocking copy's pinned destination to show it has not run
@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize("non_blocking", [False, True])
def test_d2h_values_and_blocking_rule(non_blocking, pinned):
    want = sample(torch.float32)
    src = want.to("spyre")
    dst = torch.full((3, 4), -1.0)
    if pinned:
        dst = dst.pin_memory()
    stream = torch.spyre.Stream()
    gate = Gate()
    with stream:
        gate.block()
        if non_blocking and pinned:
            dst.copy_(src, non_blocking=True)
            assert torch.equal(dst, torch.full((3, 4), -1.0))  # not written yet
            gate.release()
            stream.synchronize()
        else:
            releaser = ReleaseLater(gate)
            dst.copy_(src, non_blocking=non_blocking)
            assert releaser.is_set(), "a pageable or blocking copy returned before it ran"
    assert torch.equal(dst, want)


@pytest.mark.races  # reads on another stream to show the copy has not run
@pytest.mark.parametrize("non_blocking", [False, True])
def test_d2d_is_stream_ordered_either_way(non_blocking):
    want = sample(torch.float32)
    src = want.to("spyre")
    dst = torch.full((3, 4), -1.0, device="spyre")
    # src and dst are written on the default stream, which neither the gated copy nor
    # the reading stream is ordered after: let those writes finish first.
    torch.spyre.synchronize()
    stream = torch.spyre.Stream()
    with stream, Gate() as gate:
        gate.block()
        dst.copy_(src, non_blocking=non_blocking)  # never waits for the device
        assert torch.equal(read_on_other_stream(dst), torch.full((3, 4), -1.0))
        gate.release()
        stream.synchronize()
    assert torch.equal(dst.cpu(), want)


def test_to_cpu_non_blocking_returns_pinned_memory_filled_in_stream_order():
    src = sample(torch.float32).to("spyre")
    stream = torch.spyre.Stream()
    with stream, Gate() as gate:
        gate.block()
        host = src.to("cpu", non_blocking=True)
        assert host.is_pinned()
        assert not stream.query()
        gate.release()
        stream.synchronize()
    assert torch.equal(host, sample(torch.float32))


def test_non_blocking_copy_keeps_its_buffers_alive():
    stream = torch.spyre.Stream()
    dst = torch.empty(1000, device="spyre")
    host = torch.full((1000,), -1.0).pin_memory()
    device_src = torch.arange(1000.0, 2000.0).to("spyre")
    with stream, Gate() as gate:
        gate.block()
        dst.copy_(torch.arange(1000.0).pin_memory(), non_blocking=True)  # source dropped at once
        host.copy_(device_src, non_blocking=True)
        del device_src  # freed in stream order
        gate.release()
        stream.synchronize()
    assert torch.equal(dst.cpu(), torch.arange(1000.0))
    assert torch.equal(host, torch.arange(1000.0, 2000.0))


@pytest.mark.parametrize(
    "src_dtype,dst_dtype",
    [
        (torch.int64, torch.float16),
        (torch.float32, torch.int32),
        (torch.float32, torch.bfloat16),
        (torch.float64, torch.float32),
        (torch.int32, torch.bool),
        (torch.bool, torch.uint8),
        (torch.float32, torch.complex64),
        (torch.complex128, torch.complex64),
    ],
    ids=str,
)
def test_dtype_conversion_in_every_direction(src_dtype, dst_dtype):
    src = sample(src_dtype)
    want = src.to(dst_dtype)
    assert torch.equal(src.to("spyre", dst_dtype).cpu(), want)  # H2D converts
    on_device = src.to("spyre")
    assert torch.equal(on_device.to("cpu", dst_dtype), want)  # D2H converts
    assert torch.equal(on_device.to(dst_dtype).cpu(), want)  # D2D converts
    assert torch.equal(on_device.t().to(dst_dtype).cpu(), want.t())  # strided and converting
    pinned_dst = torch.empty(3, 4, dtype=dst_dtype).pin_memory()
    pinned_dst.copy_(on_device, non_blocking=True)
    torch.spyre.synchronize()
    assert torch.equal(pinned_dst, want)


def test_complex_to_real_copy_keeps_the_real_part():
    src = torch.tensor([1.5 + 2j, -3 - 1j]).to("spyre")
    assert torch.equal(src.real.cpu(), torch.tensor([1.5, -3.0]))
    dst = torch.empty(2, device="spyre")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "discards the imaginary part", once per process
        dst.copy_(src)
    assert dst.cpu().tolist() == [1.5, -3.0]


# ---------------------------------------------------------------- compute on streams


def test_issue_example_with_sleep():
    x = torch.arange(4.0).pin_memory()
    s = torch.spyre.Stream()
    with s:
        torch.spyre._sleep(300)
        y = x.to("spyre", non_blocking=True)
        z = (y + 1).cpu()
    assert z.tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "pageable"])
def test_issue_example_with_a_gate(pinned):
    x = torch.arange(4.0)
    if pinned:
        x = x.pin_memory()
    s = torch.spyre.Stream()
    gate = Gate()
    with s:
        gate.block()
        releaser = ReleaseLater(gate)
        y = x.to("spyre", non_blocking=True)
        # Pinned: the copy is still queued, so y + 1 must wait for it.
        assert releaser.is_set() != pinned
        z = (y + 1).cpu()
        assert releaser.is_set()
    assert z.tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.races  # reads a on another stream to show the queued work has not run
def test_compute_is_queued_in_stream_order_after_earlier_work():
    a = torch.arange(6.0).to("spyre")
    s = torch.spyre.Stream()
    with s:
        (a * 3, a.mul_(1))  # warm: each kernel signature's first call is tried at the call
    with Gate() as gate, s:
        gate.block()
        a.fill_(2.0)  # queued behind the gate
        b = a * 3  # queued after the fill: returns at once
        a.mul_(10)  # in-place, queued too
        assert read_on_other_stream(a).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    s.synchronize()
    assert read_on_other_stream(b).tolist() == [6.0] * 6
    assert read_on_other_stream(a).tolist() == [20.0] * 6


def test_out_variant_resizes_its_output():
    a, b = torch.arange(4.0).to("spyre"), torch.ones(4, device="spyre")
    out = torch.empty(0, device="spyre")
    torch.add(a, b, out=out)
    assert out.shape == (4,) and out.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_common_ops_on_spyre():
    cpu = sample(torch.float32)
    dev = cpu.to("spyre")
    assert torch.equal((dev @ dev.t()).cpu(), cpu @ cpu.t())
    assert torch.equal(dev.sum(dim=1).cpu(), cpu.sum(dim=1))
    assert dev.max().item() == cpu.max().item()
    assert torch.equal(dev[torch.tensor([0, 2])].cpu(), cpu[torch.tensor([0, 2])])
    assert torch.equal(torch.where(dev > 0, dev, -dev).cpu(), cpu.abs())
    assert torch.equal(torch.cat([dev, dev]).cpu(), torch.cat([cpu, cpu]))
    assert dev.tolist() == cpu.tolist()
    assert repr(torch.arange(3).to("spyre")) == "tensor([0, 1, 2], device='spyre:0')"


# ---------------------------------------------------------------- memory stats


def stat(key):
    return torch.accelerator.memory_stats().get(key, 0)


def test_memory_allocated_moves_by_exactly_the_tensor_size(empty_device):
    torch.accelerator.empty_cache()
    base = torch.accelerator.memory_allocated()
    reserved = torch.accelerator.memory_reserved()
    free, total = torch.accelerator.get_memory_info()
    x = torch.empty(256, device="spyre")
    assert torch.accelerator.memory_allocated() == base + 1024
    assert torch.accelerator.memory_allocated("spyre:0") == base + 1024
    # A new 2 MiB small-pool segment, unless a cached one had room.
    grown = torch.accelerator.memory_reserved() - reserved
    assert grown in (0, 2**21)
    assert torch.accelerator.get_memory_info() == (free - grown, total)
    del x
    assert torch.accelerator.memory_allocated() == base
    assert torch.accelerator.memory_reserved() == reserved + grown  # cached, not returned
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() == reserved
    assert torch.accelerator.get_memory_info() == (free, total)


def test_memory_stats_counters_pools_and_resets(empty_device):
    assert torch.accelerator.memory_reserved() == 0, "a tensor outlived its test"
    torch.accelerator.reset_accumulated_memory_stats()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == 0
    assert stat("allocated_bytes.all.allocated") == 0 and stat("num_device_alloc") == 0
    small = torch.empty(256, device="spyre")  # 1 KiB: small pool, a 2 MiB segment
    large = torch.empty(2 * 2**20, dtype=torch.uint8, device="spyre")  # large pool, 20 MiB
    assert stat("allocated_bytes.all.current") == 1024 + 2**21
    assert stat("allocated_bytes.all.allocated") == 1024 + 2**21
    assert stat("allocated_bytes.large_pool.allocated") == 2**21
    assert stat("allocated_bytes.small_pool.allocated") == 1024
    assert stat("reserved_bytes.small_pool.current") == 2**21
    assert stat("reserved_bytes.large_pool.current") == 20 * 2**20
    assert stat("allocation.all.allocated") == 2 and stat("num_device_alloc") == 2
    assert stat("requested_bytes.all.allocated") == 1024 + 2**21
    del large
    assert torch.accelerator.max_memory_allocated() == 1024 + 2**21
    assert torch.accelerator.max_memory_reserved() == 22 * 2**20
    assert stat("allocated_bytes.all.freed") == 2**21 and stat("num_device_free") == 0
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == 1024
    torch.accelerator.empty_cache()  # the large segment is unused: returned
    assert stat("num_device_free") == 1 and torch.accelerator.memory_reserved() == 2**21
    assert torch.accelerator.memory_allocated() == 1024
    del small
    torch.accelerator.reset_accumulated_memory_stats()
    assert stat("allocated_bytes.all.allocated") == 0 and stat("allocated_bytes.all.freed") == 0
    assert stat("num_ooms") == 0 and stat("num_alloc_retries") == 0
    empty = torch.empty(0, device="spyre")  # no memory: counts nothing, as on CUDA
    assert stat("allocation.all.allocated") == 0 and stat("num_device_alloc") == 0
    assert empty.cpu().shape == (0,) and empty.data_ptr() == 0


# ---------------------------------------------------------------- stream-ordered frees


@pytest.fixture
def no_stray_frees():
    """Tests that expect best fit to hand back a given block: garbage of earlier
    tests (tensors in reference cycles) collected mid-test would add free blocks
    it prefers."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@pytest.mark.usefixtures("no_stray_frees")
def test_block_used_by_a_gated_stream_is_reused_only_after_the_work():
    active = stat("active_bytes.all.current")
    allocated = torch.accelerator.memory_allocated()
    src = torch.ones(256, device="spyre")  # allocated on the default stream
    ptr = src.data_ptr()
    dst = torch.empty(256, device="spyre")
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())  # src was written on the default stream
    gate = Gate()
    with s:
        gate.block()
        dst.copy_(src)  # queued on s, reads src
    del src
    # The host let go: no longer allocated, but still active (s may read it).
    assert torch.accelerator.memory_allocated() == allocated + 1024
    assert stat("active_bytes.all.current") == active + 2048
    again = torch.empty(256, device="spyre")
    assert again.data_ptr() != ptr, "block reused while s may still read it"
    del again
    gate.release()
    s.synchronize()
    reused = torch.empty(256, device="spyre")  # the event completed: back in the pool
    assert reused.data_ptr() == ptr
    assert stat("active_bytes.all.current") == active + 2048
    del reused
    assert dst.cpu().tolist() == [1.0] * 256


@pytest.mark.usefixtures("no_stray_frees")
def test_record_stream_delays_the_reuse():
    t = torch.ones(256, device="spyre")
    ptr = t.data_ptr()
    s = torch.spyre.Stream()
    gate = Gate()
    with s:
        gate.block()
    t.record_stream(s)
    del t
    assert torch.empty(256, device="spyre").data_ptr() != ptr
    gate.release()
    s.synchronize()
    assert torch.empty(256, device="spyre").data_ptr() == ptr


@pytest.mark.usefixtures("no_stray_frees")
def test_free_recorded_on_an_idle_stream_waits_only_for_its_marker():
    # On a stream of its own (blocks belong to their allocation stream), so no
    # other test's cached block of the same size competes for best fit.
    s = torch.spyre.Stream()
    other = torch.spyre.Stream()
    torch.accelerator.empty_cache()
    with s:
        t = torch.ones(256, device="spyre")
        ptr = t.data_ptr()
        torch.spyre.synchronize()
        t.record_stream(other)
        del t  # queues a marker on `other`; the block is free once it completes
        other.synchronize()  # the marker, nothing else: `other` had no work
        assert torch.empty(256, device="spyre").data_ptr() == ptr


def test_upstream_record_stream_pattern():
    # test_cuda.py::test_record_stream, with a gate instead of a calibrated sleep.
    t = torch.tensor([1.0, 2.0, 3.0, 4.0]).pin_memory()
    result = torch.empty(4, device="spyre")
    stream = torch.spyre.Stream()
    gate = Gate()
    with stream:
        tmp = t.to("spyre", non_blocking=True)
        ptr = tmp.data_ptr()
    torch.spyre.current_stream().wait_stream(stream)
    tmp.record_stream(torch.spyre.current_stream())
    gate.block()  # delays the copy below on the current stream
    result.copy_(tmp)
    del tmp
    with stream:
        tmp2 = torch.empty(4, device="spyre")
        tmp2.zero_()
        assert tmp2.data_ptr() != ptr, "allocation re-used too soon"
    gate.release()
    assert result.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_autograd_stream_handling_records_on_the_consumer_stream():
    x = torch.arange(4.0, device="spyre", requires_grad=True)
    s = torch.spyre.Stream()
    s.wait_stream(torch.spyre.current_stream())  # x was written on the default stream
    with s:
        y = (x * x + 3 * x).sum()
    y.backward()
    torch.spyre.synchronize()
    assert x.grad.device == SPYRE
    assert x.grad.cpu().tolist() == [3.0, 5.0, 7.0, 9.0]


def test_storage_and_tensor_resize_are_stream_ordered_and_keep_data():
    x = torch.arange(4.0).to("spyre")
    s = torch.spyre.Stream()
    gate = Gate()
    with s:
        gate.block()
        x[:2].fill_(9.0)  # queued behind the gate
        releaser = ReleaseLater(gate)  # only if resize_ wrongly waits
        x.resize_(6)  # grows by a queued D2D: no host wait
        x.untyped_storage().resize_(40)
        assert not releaser.is_set(), "resize_ waited for the device"
        releaser.cancel()
        gate.release()
    torch.spyre.synchronize()
    assert x.shape == (6,) and x.untyped_storage().nbytes() == 40
    assert x.cpu()[:4].tolist() == [9.0, 9.0, 2.0, 3.0]


# ---------------------------------------------------------------- pinned memory


def test_pinned_memory():
    pinned = torch.arange(10.0).pin_memory()
    assert pinned.is_pinned() and pinned[3:].is_pinned()
    assert not torch.arange(10.0).is_pinned()
    assert torch.equal(pinned, torch.arange(10.0))
    assert torch.empty(5, pin_memory=True).is_pinned()
    assert torch.empty(0).pin_memory().is_pinned() is False  # nothing to pin
    torch.accelerator.empty_host_cache()
    with pytest.raises(RuntimeError, match="pin_memory=True is only valid for CPU tensors"):
        torch.empty(3, device="spyre", pin_memory=True)


def test_empty_host_cache_after_lazy_init_does_not_crash():
    proc = run_python(
        """
        import torch
        torch.empty(1, device="spyre")
        torch.accelerator.empty_host_cache()
        p = torch.ones(4).pin_memory()
        torch.accelerator.empty_host_cache()
        print(p.is_pinned())
        """
    )
    assert proc.stdout.strip() == "True"


# ---------------------------------------------------------------- RNG


def test_random_factories_and_in_place_draws():
    torch.manual_seed(0)
    n = torch.randn(1000, device="spyre")
    u = torch.rand(1000, device="spyre", dtype=torch.float16)
    r = torch.randint(3, 9, (1000,), device="spyre")
    assert (n.device, u.device, r.device) == (SPYRE, SPYRE, SPYRE)
    assert (n.dtype, u.dtype, r.dtype) == (torch.float32, torch.float16, torch.int64)
    u_cpu, r_cpu = u.cpu(), r.cpu()
    assert 0 <= u_cpu.min() and u_cpu.max() < 1
    assert set(r_cpu.tolist()) == set(range(3, 9))
    t = torch.empty(1000, device="spyre")
    t.uniform_(-2, -1)
    assert -2 <= t.min().item() and t.max().item() < -1
    t.normal_(5, 0.001)
    assert abs(t.mean().item() - 5) < 0.01
    strided = torch.zeros(4, 6, device="spyre")
    strided[:, ::2].uniform_(1, 2)
    assert (strided.cpu()[:, 1::2] == 0).all() and (strided.cpu()[:, ::2] >= 1).all()


def test_manual_seed_reproduces_cpu_sequences_exactly():
    def draw(device):
        torch.manual_seed(1234)
        return [
            torch.randn(20, device=device).cpu(),
            torch.rand(3, 5, device=device).cpu(),
            torch.randint(0, 100, (7,), device=device).cpu(),
            torch.empty(9, device=device).normal_(2, 3).cpu(),
            torch.empty(9, device=device).uniform_(-1, 1).cpu(),
        ]

    first, second, cpu = draw("spyre"), draw("spyre"), draw("cpu")
    for a, b, c in zip(first, second, cpu):
        assert torch.equal(a, b) and torch.equal(a, c)


# Views whose layout changes how CPU kernels consume draws: transposed (dense,
# not contiguous), strided with gaps, a storage offset, and both at once.
RANDOM_VIEWS = {
    "transposed": lambda x: x.t(),
    "every-other-column": lambda x: x[:, ::2],
    "offset": lambda x: x[3:, 5:],
    "transposed-strided": lambda x: x.t()[::3, 1:],
}

# Every random op, in place or *_like: kernels of their own (normal_,
# uniform_, exponential_, bernoulli_(float), random_ x3) and the CPU fallback
# (bernoulli_(Tensor), log_normal_, cauchy_, geometric_).
RANDOM_OPS = {
    "normal_": lambda t: t.normal_(1.0, 2.0),
    "uniform_": lambda t: t.uniform_(-1.0, 3.0),
    "exponential_": lambda t: t.exponential_(1.5),
    "bernoulli_float": lambda t: t.bernoulli_(0.3),
    "bernoulli_tensor": lambda t: t.bernoulli_(
        torch.linspace(0, 1, t.shape[-1], device=t.device).expand(t.shape)
    ),
    "random_": lambda t: t.random_(),
    "random_to": lambda t: t.random_(100),
    "random_from": lambda t: t.random_(-5, 50),
    "log_normal_": lambda t: t.log_normal_(0.5, 0.7),
    "cauchy_": lambda t: t.cauchy_(0.0, 1.0),
    "geometric_": lambda t: t.geometric_(0.3),
    "randn_like": torch.randn_like,
    "rand_like": torch.rand_like,
    "randint_like": lambda t: torch.randint_like(t, 3, 10),
}


@pytest.mark.parametrize("view", RANDOM_VIEWS)
@pytest.mark.parametrize("op", RANDOM_OPS)
def test_seeded_draws_into_non_contiguous_tensors_equal_cpu(view, op):
    def draw(device):
        torch.manual_seed(0)
        return RANDOM_OPS[op](RANDOM_VIEWS[view](torch.empty(20, 30, device=device)))

    spyre, cpu = draw("spyre"), draw("cpu")
    assert spyre.stride() == cpu.stride()
    assert torch.equal(spyre.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
def test_seeded_draws_into_transposed_tensors_equal_cpu_for_other_dtypes(dtype):
    def draw(device):
        torch.manual_seed(0)
        t = torch.empty(20, 30, device=device, dtype=dtype).t()
        return t.random_(0, 100) if dtype == torch.int32 else t.normal_()

    assert torch.equal(draw("spyre").cpu(), draw("cpu"))


def test_random_fill_of_an_overlapping_tensor_raises_cpu_error_and_leaves_the_stream_usable():
    # Drawn into a host tensor of self's layout, the overlap is CPU's error at
    # the call; a copy into the overlapping view on the stream used to fail
    # there and poison the stream.
    run_python(
        """
        import pytest, torch
        x = torch.empty(5, 1, device="spyre").expand(5, 3)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            x.normal_()
        assert torch.ones(2, device="spyre").cpu().tolist() == [1.0, 1.0]
        torch.spyre.synchronize()
        """
    )


def test_rng_state_round_trips():
    torch.spyre.manual_seed(7)
    state = torch.spyre.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = torch.rand(8, device="spyre").cpu()
    torch.spyre.set_rng_state(state)
    assert torch.equal(torch.rand(8, device="spyre").cpu(), first)
    assert torch.equal(torch.spyre.get_rng_state("spyre:0"), torch.spyre.get_rng_state())
    # The process uses one of the 8 visible devices: fork only its generator.
    with torch.random.fork_rng(devices=[torch.spyre.current_device()], device_type="spyre"):
        torch.rand(8, device="spyre")
    after = torch.rand(8, device="spyre").cpu()
    torch.spyre.set_rng_state(state)
    torch.rand(8, device="spyre")
    assert torch.equal(torch.rand(8, device="spyre").cpu(), after)


def test_fork_rng_without_devices_forks_every_visible_device():
    # As with 8 CUDA devices: torch forks all 8 generators (host state, so the
    # devices this process is not bound to work too) and warns once.
    proc = run_python(
        """
        import warnings, torch
        torch.manual_seed(3)
        before = torch.spyre.get_rng_state_all()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with torch.random.fork_rng(device_type="spyre"):
                torch.spyre.manual_seed_all(11)
                changed = torch.spyre.get_rng_state(5).equal(before[5])
        after = torch.spyre.get_rng_state_all()
        print(len(before), changed, all(a.equal(b) for a, b in zip(before, after)))
        print([(w.category.__name__, str(w.message).split(",")[0]) for w in caught])
        print(torch.spyre.is_initialized())
        """
    )
    assert proc.stdout.splitlines() == [
        "8 False True",
        "[('UserWarning', 'SPYRE reports that you have 8 available devices')]",
        "False",
    ]


def test_explicit_generator():
    g = torch.Generator(device="spyre")
    assert g.device == SPYRE
    g.manual_seed(5)
    a = torch.randn(16, device="spyre", generator=g).cpu()
    torch.manual_seed(99)  # the default generator does not affect g
    g.manual_seed(5)
    b = torch.empty(16, device="spyre").normal_(generator=g).cpu()
    assert torch.equal(a, b)
    assert torch.equal(a, torch.randn(16, generator=torch.Generator().manual_seed(5)))
    g.manual_seed(5)
    state = g.get_state()
    c = torch.rand(4, device="spyre", generator=g).cpu()
    g.set_state(state)
    assert torch.equal(torch.rand(4, device="spyre", generator=g).cpu(), c)
    with pytest.raises(RuntimeError, match="Expected a spyre generator"):
        torch.empty(3, device="spyre").normal_(generator=torch.Generator())


def test_random_ops_without_a_kernel_use_the_spyre_generator():
    cpu_state = torch.get_rng_state()
    probabilities = torch.tensor([0.1, 0.2, 0.3, 0.4]).to("spyre")

    def draw(**generator):
        return [
            torch.randperm(10, device="spyre", **generator).cpu(),
            torch.multinomial(probabilities, 3, **generator).cpu(),
            torch.bernoulli(probabilities.expand(2, 4), **generator).cpu(),
            torch.empty(5, device="spyre").geometric_(0.3, **generator).cpu(),
        ]

    torch.spyre.manual_seed(11)
    first = draw()
    torch.spyre.manual_seed(11)
    assert all(torch.equal(a, b) for a, b in zip(first, draw()))
    g = torch.Generator(device="spyre").manual_seed(11)
    assert all(torch.equal(a, b) for a, b in zip(first, draw(generator=g)))
    # The same sequence CPU gives for the same seed, and CPU's generator is untouched.
    assert torch.equal(torch.get_rng_state(), cpu_state)
    torch.manual_seed(11)
    assert torch.equal(first[0], torch.randperm(10))


def test_random_draws_follow_program_order_across_streams():
    torch.manual_seed(3)
    s1, s2 = torch.spyre.Stream(), torch.spyre.Stream()
    with s1, Gate() as gate:
        gate.block()
        a = torch.rand(5, device="spyre")  # drawn now, written when s1 runs
        with s2:
            b = torch.rand(5, device="spyre")
        gate.release()
    torch.spyre.synchronize()
    torch.manual_seed(3)
    assert torch.equal(a.cpu(), torch.rand(5)) and torch.equal(b.cpu(), torch.rand(5))


# ---------------------------------------------------------------- upstream stream-test patterns


def test_tensor_work_in_nested_stream_contexts():
    torch.manual_seed(0)
    ref_a, ref_b = torch.randn(64), torch.randn(64)
    torch.manual_seed(0)
    outer, middle = torch.spyre.Stream(), torch.Stream(device="spyre")
    inner = torch.spyre.Stream(priority=-1)
    default = torch.spyre.current_stream()
    with outer:
        a = torch.randn(64, device="spyre")
        with middle:
            middle.wait_stream(outer)
            b = torch.randn(64, device="spyre")
            with torch.spyre.stream(inner):
                inner.wait_stream(middle)
                assert torch.accelerator.current_stream() == inner
                c = a + b
                d = torch.add(a, b, alpha=2)
                e = a.half() + b.half()
                f = torch.add(a.half(), b.half())
            assert torch.accelerator.current_stream() == middle
            middle.wait_stream(inner)  # c, d, e and f were computed on inner
            g = c * d
        assert torch.spyre.current_stream() == outer
        outer.wait_stream(middle)
        h = g - e.float()
    assert torch.spyre.current_stream() == default
    torch.accelerator.synchronize()
    assert torch.equal(c.cpu(), ref_a + ref_b)
    assert torch.equal(d.cpu(), torch.add(ref_a, ref_b, alpha=2))
    assert e.dtype == torch.float16 and torch.equal(e.cpu(), ref_a.half() + ref_b.half())
    assert torch.equal(f.cpu(), e.cpu())
    ref_g = (ref_a + ref_b) * torch.add(ref_a, ref_b, alpha=2)
    assert torch.equal(h.cpu(), ref_g - (ref_a.half() + ref_b.half()).float())


def test_upstream_copy_non_blocking_pattern():
    # test_cuda.py::test_copy_non_blocking: copy, record an event, sync it, compare.
    def copy_and_check(a, b):
        event = torch.Event(device="spyre")
        a.copy_(b, non_blocking=True)
        event.record()
        event.synchronize()
        assert torch.equal(a.cpu(), b.cpu())

    x = torch.ones(100_000, dtype=torch.uint8).to("spyre")
    y = torch.zeros(100_000, dtype=torch.uint8).pin_memory()
    copy_and_check(x, y)
    x = torch.zeros(100_000, dtype=torch.uint8).pin_memory()
    y = torch.ones(100_000, dtype=torch.uint8).to("spyre")
    copy_and_check(x, y)
    copy_and_check(torch.zeros(1000, device="spyre"), torch.ones(1000, device="spyre"))


def test_events_order_tensor_work_across_streams():
    producer, consumer = torch.spyre.Stream(), torch.spyre.Stream()
    done = torch.Event(device="spyre")
    with producer, Gate() as gate:
        gate.block()
        x = torch.zeros(8, device="spyre")
        x.fill_(4.0)
        done.record()
        with consumer:
            consumer.wait_event(done)
            y = torch.empty(8, device="spyre")
            y.copy_(x)  # D2D on the consumer, after the event
            assert not done.query()
            gate.release()
    consumer.synchronize()
    assert y.cpu().tolist() == [4.0] * 8


def test_autograd_backward():
    x = torch.tensor([1.0, -2.0, 3.0], device="spyre", requires_grad=True)
    w = torch.tensor([[0.5, 1.0, -1.0]], device="spyre", requires_grad=True)
    loss = ((w @ x) ** 2).sum() + x.exp().sum()
    loss.backward()
    xc = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    wc = torch.tensor([[0.5, 1.0, -1.0]], requires_grad=True)
    (((wc @ xc) ** 2).sum() + xc.exp().sum()).backward()
    assert x.grad.device == SPYRE and w.grad.device == SPYRE
    assert torch.allclose(x.grad.cpu(), xc.grad) and torch.equal(w.grad.cpu(), wc.grad)


def test_local_scalar_and_equality():
    assert torch.tensor(3.5).to("spyre").item() == 3.5
    assert torch.tensor([7], dtype=torch.int64).to("spyre").item() == 7
    assert torch.tensor(True).to("spyre").item() is True
    assert torch.tensor(1 - 2j).to("spyre").item() == 1 - 2j
    a = torch.arange(5).to("spyre")
    assert torch.equal(a, a.clone()) and not torch.equal(a, a + 1)


# ---------------------------------------------------------------- bad input


def test_copies_with_meta_tensors():
    dst = torch.full((3,), 5.0, device="spyre")
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        dst.copy_(torch.ones(3, device="meta"))
    assert dst.cpu().tolist() == [5.0] * 3
    # Into meta is a shape-only operation, as for every device.
    meta = dst.to("meta")
    assert meta.device.type == "meta" and meta.shape == (3,)


def test_device_work_is_checked_before_it_is_queued():
    # A failing device operation would leave its stream unusable for good, so
    # these raise on the host and the stream keeps working.
    t = torch.zeros(4, dtype=torch.int8, device="spyre")
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
        t.fill_(300)
    with pytest.raises(RuntimeError, match="value cannot be converted to type float without overflow"):
        torch.zeros(2, device="spyre").fill_(1 + 1j)
    expanded = torch.zeros(4, device="spyre").expand(3, 4)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        expanded.copy_(torch.ones(3, 4))
    base = torch.arange(6.0).to("spyre")
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to"):
        base[1:].copy_(base[:-1])
    assert (t + 1).cpu().tolist() == [1, 1, 1, 1]
    assert base.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_unbound_second_device():
    proc = run_python(
        """
        import torch
        assert torch.spyre.device_count() == 2
        x = torch.arange(3.0, device="spyre")
        bound = "bound to spyre:0 but spyre:1 was requested"
        for attempt in (
            lambda: torch.empty(3, device="spyre:1"),
            lambda: x.to("spyre:1"),
            lambda: torch.ones(2).to("spyre:1"),
            lambda: torch.randn(2, device="spyre:1"),
            lambda: torch.accelerator.memory_allocated(1),
            lambda: torch.accelerator.reset_peak_memory_stats(1),
            lambda: torch.accelerator.get_memory_info(1),
        ):
            try:
                attempt()
            except RuntimeError as e:
                assert bound in str(e), str(e)
            else:
                raise AssertionError("no error")
        torch.spyre.set_device(1)
        try:
            torch.ones(2, device="spyre")
        except RuntimeError as e:
            assert bound in str(e), str(e)
        else:
            raise AssertionError("no error")
        torch.spyre.set_device(0)
        assert x.cpu().tolist() == [0.0, 1.0, 2.0]
        assert torch.accelerator.memory_allocated(0) == 512  # 12 bytes, rounded as on CUDA
        print("ok")
        """,
        env={"AIU_WORLD_SIZE": "2"},
    )
    assert proc.stdout.strip() == "ok"


def test_out_of_memory_names_sizes_and_leaves_nothing_half_written():
    # 4 MiB: the 2 MiB small segment fits, a 20 MiB large one never does.
    proc = run_python(
        """
        import torch
        x = torch.arange(100.0, device="spyre")  # 400 bytes (512 rounded) of a 2 MiB segment
        def expect_oom(attempt):
            try:
                attempt()
            except torch.OutOfMemoryError as e:
                return str(e)
            raise AssertionError("no error")
        message = expect_oom(lambda: torch.empty(300000, device="spyre"))
        assert "Spyre out of memory on spyre:0: tried to allocate 1200000 bytes " \\
            "(a segment of 20971520 bytes)" in message, message
        assert "4194304 bytes in total, 2097152 free" in message, message
        assert "PyTorch holds 512 bytes in tensors and 2097152 bytes reserved" in message, message
        expect_oom(lambda: x.resize_(300000))
        assert x.shape == (100,) and x.cpu().tolist() == [float(i) for i in range(100)]
        expect_oom(lambda: x.untyped_storage().resize_(1200000))
        assert x.untyped_storage().nbytes() == 400
        expect_oom(lambda: torch.ones(300000).to("spyre"))
        out = torch.empty(0, device="spyre")
        expect_oom(lambda: torch.cat([x] * 3000, out=out))  # the launch path resizes `out`
        assert out.shape == (0,)
        assert torch.accelerator.memory_allocated() == 512
        stats = torch.accelerator.memory_stats()
        assert stats["num_ooms"] == 5, stats["num_ooms"]
        assert stats["num_alloc_retries"] == 5, stats["num_alloc_retries"]
        assert isinstance(torch.OutOfMemoryError("x"), RuntimeError)
        y = torch.ones(100, device="spyre")  # the device still works
        assert (x[:10] + y[:10]).cpu().tolist() == [float(i + 1) for i in range(10)]
        print("ok")
        """,
        env={"FLEX_STUB_MEMORY_BYTES": str(4 * 2**20)},
    )
    assert proc.stdout.strip() == "ok"


def test_allocation_waits_for_stream_ordered_frees_before_reporting_oom():
    proc = run_python(
        """
        import torch
        s = torch.spyre.Stream()
        a = torch.ones(300000, device="spyre")  # a 20 MiB segment: the whole device
        with s:
            torch.spyre._sleep(500)
        a.record_stream(s)
        del a  # waits for an event on s before it can be reused or returned
        b = torch.zeros(5000000, device="spyre")  # needs the whole device once s has run
        stats = torch.accelerator.memory_stats()
        assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0, stats
        assert stats["num_device_free"] == 1 and stats["num_sync_all_streams"] == 1, stats
        assert b.cpu().eq(0).all()
        print("ok")
        """,
        env={"FLEX_STUB_MEMORY_BYTES": str(20 * 2**20)},
    )
    assert proc.stdout.strip() == "ok"


def test_block_queued_on_a_failing_stream_is_still_returned():
    # The stub discards the queue of a stream whose operation fails; the event
    # recorded there at free time still completes, so the block comes back.
    proc = run_python(
        """
        import torch
        from torch_spyre.testing import Gate
        s = torch.spyre.Stream()
        t = torch.empty(256, device="spyre")  # launches nothing
        gate = Gate()
        # The runtime's first operation check passes and parks at the gate; the
        # second (the event recorded when t is freed) fails (FLEX_STUB_FAULT_AFTER=1).
        gate.block(s)
        t.record_stream(s)
        del t
        assert torch.accelerator.memory_stats()["active_bytes.all.current"] == 1024
        gate.release()
        try:
            s.synchronize()
        except RuntimeError as e:
            assert "injected fault" in str(e), str(e)
        else:
            raise AssertionError("no fault")
        torch.accelerator.empty_cache()
        assert torch.accelerator.memory_reserved() == 0
        assert torch.accelerator.memory_stats()["active_bytes.all.current"] == 0
        print("ok")
        """,
        env={"FLEX_STUB_FAULT_AFTER": "1"},
    )
    assert proc.stdout.strip() == "ok"
