"""Issue 33, item 2 (allocator reuse): a block handed to a new owner while an earlier access on
another stream is not ordered before the new owner's access is reported as a race between those
two accesses. Every public launch records its uses on the allocator (which then hands a block on
only after an event covering them), so the report needs an access the allocator does not know of:
the sanitizer's private collective binding makes one here. spyreccl now records the tensors gloo
reads in place too: before, a read-only input freed before work.wait() could be reported,
depending on when the progress thread dropped its host view."""

import pytest

from _helpers import WAIT_UNTIL
from conftest import run_python
from test_sanitizer import DEFAULT, stream_name

N = 1024  # float32 elements: 4096 bytes

# A fresh allocator (a new process): the freed block is the only one of its size.
REUSE = """
    import torch
    from torch_spyre import _C
    from torch.spyre.sanitizer import UnsynchronizedAccessError
    s = torch.spyre.Stream()
    x = torch.ones(1024, device="spyre")
    torch.spyre.synchronize()
    first = x.data_ptr()
    torch.spyre.sanitizer.enable()
    # x read on s with no use recorded on the allocator (as a collective reading in place did)
    _C._sanitizer_collective(s.stream_id, 0, "allgather", [x], [False])
    {fix}
    del x                                   # the block goes back to the default stream's pool
    y = torch.empty(1024, device="spyre")
    print(y.data_ptr() == first)
    try:
        y.fill_(3)                          # the new owner writes it on the default stream
        print("quiet", y.sum().item())
    except UnsynchronizedAccessError as e:
        print(e)
    """


def test_a_block_reused_under_an_unordered_access_is_reported():
    proc = run_python(REUSE.format(fix=""), timeout=60)
    out = proc.stdout.rstrip("\n").splitlines()  # the report ends with a newline
    comm = 1  # s: the process's first pool stream
    assert out[:4] == [
        "True",  # handed on at once: nothing recorded it on s
        "spyre sanitizer: unsynchronized access (write-after-read)",
        f"  this access:    aten::fill_.Scalar writes tensor float32[{N}] on {DEFAULT}",
        f"  earlier access: allgather reads tensor float32[{N}] on {stream_name(comm)}, not ordered before it",
    ]
    assert out[4].startswith("  overlapping bytes: [0x") and out[4].endswith(f") ({4 * N} bytes)")
    assert out[-1].startswith(f"  fix: {DEFAULT} must wait for {stream_name(comm)} before this access: "
                              f"torch.spyre.default_stream().wait_stream(<{stream_name(comm)}>)")
    assert out[-1].endswith(f"if the earlier access's tensor was freed, call its "
                            f"record_stream(<{stream_name(comm)}>) before freeing it")


def test_record_stream_before_the_free_silences_it():
    """The allocator hands the block on after an event on s, which covers the access."""
    proc = run_python(REUSE.format(fix="x.record_stream(s)"), timeout=60)
    assert proc.stdout.splitlines()[1:] == [f"quiet {3.0 * N}"]


@pytest.mark.timeout(120)
def test_a_collective_input_freed_before_wait_is_not_reported():
    """gloo reads x in place on the group's communication stream; x is freed before work.wait()
    and its block may be reused once the collective is done: spyreccl records x on that stream,
    so the allocator's event orders the read before the next owner (whenever the reuse happens)."""
    proc = run_python(WAIT_UNTIL + """
import os, torch, torch.distributed as dist
dist.init_process_group("spyreccl", init_method="file://" + os.path.abspath("store"),
                        rank=0, world_size=1)
torch.spyre.sanitizer.enable()
x = torch.ones(1024, device="spyre")
out = [torch.empty(1024, device="spyre")]
torch.spyre.synchronize()
work = dist.all_gather(out, x, async_op=True)   # reads x in place on the comm stream
del x
wait_until(work.is_completed, what="the all_gather")
for _ in range(3):
    y = torch.empty(1024, device="spyre")
    y.fill_(3)                                   # the first write of each new owner
work.wait()
print(out[0].sum().item(), y.sum().item())
dist.destroy_process_group()
""", timeout=100)
    assert proc.stdout.splitlines() == [f"{1.0 * N} {3.0 * N}"]
    assert "unsynchronized access" not in proc.stderr
