"""torch.spyre.memory_summary(): torch.cuda.memory_summary's table, with spyre's labels, over
the caching allocator's stats."""

import pytest
import torch

from conftest import run_python


# torch.cuda's labels and the 21-column ones spyre prints instead.
CUDA_LABELS = {
    "GPU reserved memory  ": "Spyre reserved memory",
    "GPU reserved segments": "Spyre reserved segs  ",
    "Oversize GPU segments": "Oversize segments    ",
}


def cuda_summary_of(stats, abbreviated, monkeypatch):
    """torch.cuda.memory_summary's text for `stats`, with spyre's labels."""
    import torch.cuda.memory as cuda_memory

    monkeypatch.setattr(cuda_memory, "memory_stats", lambda device=None: stats)
    text = cuda_memory.memory_summary(0, abbreviated=abbreviated)
    for cuda, spyre in CUDA_LABELS.items():
        text = text.replace(cuda, spyre)
    return text.splitlines()


@pytest.mark.parametrize("abbreviated", [False, True])
def test_memory_summary_has_cudas_format(abbreviated, monkeypatch):
    keep = [torch.empty(n, device="spyre") for n in (100, 300_000, 3_000_000)]
    stats = torch.spyre.memory_stats()
    ours = torch.spyre.memory_summary(abbreviated=abbreviated).splitlines()
    theirs = cuda_summary_of(stats, abbreviated, monkeypatch)
    assert len(ours) == len(theirs) == (47 if not abbreviated else 29)
    assert {len(line) for line in ours} == {77}
    assert ours[1] == "|                  PyTorch Spyre memory summary, device ID 0                |"
    assert ours[3] == (f"|            Spyre OOMs: {stats['num_ooms']:<11d} |     segment alloc retries: "
                       f"{stats['num_alloc_retries']:<8d}  |")
    assert [ours[i] for i in range(len(ours)) if i not in (1, 3)] == \
        [theirs[i] for i in range(len(theirs)) if i not in (1, 3)]
    assert torch.spyre.memory_summary(0, abbreviated) == torch.spyre.memory_summary("spyre:0", abbreviated)
    del keep


def test_memory_summary_rows_in_a_fresh_process():
    proc = run_python("""
        import torch
        x = torch.empty(256, device="spyre")  # 1024 bytes
        y = torch.empty(256, device="spyre")
        del y
        print(torch.spyre.memory_summary(abbreviated=True))
    """)
    lines = proc.stdout.splitlines()
    rows = {line.split("|")[1].strip(): line for line in lines if line.count("|") == 6}
    assert rows["Allocated memory"] == (
        "| Allocated memory      |   1024 B   |   2048 B   |   2048 B   |   1024 B   |")
    assert rows["Spyre reserved memory"] == (
        "| Spyre reserved memory |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |")
    assert rows["Allocations"] == (
        "| Allocations           |       1    |       2    |       2    |       1    |")
    assert rows["Spyre reserved segs"] == (
        "| Spyre reserved segs   |       1    |       1    |       1    |       0    |")
