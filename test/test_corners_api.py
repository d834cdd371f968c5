"""Issue 31, items 17 and 18: torch.spyre.memory_summary() and upstream
torch-spyre's torch_spyre.profiler package (diagnostic reports)."""

import json
import re
from pathlib import Path

import pytest
import torch

from conftest import run_python

# ---------------------------------------------------------------- item 17

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


# ---------------------------------------------------------------- item 18: torch_spyre.profiler


def test_profiler_package_offers_upstreams_imports():
    import torch_spyre.profiler
    from torch_spyre.profiler import get_diagnostic_report
    from torch_spyre.profiler._ffdc import (  # noqa: F401
        CATEGORY_COMPILE_BACKEND, CATEGORY_COMPILE_FRONTEND, CATEGORY_RUNTIME_LAUNCH,
        CATEGORY_UNIMPLEMENTED, CATEGORY_UNKNOWN, REQUIRED_FIELDS, collect, try_collect)

    assert callable(get_diagnostic_report)
    # upstream's package has no is_available (its tests check that it is absent)
    assert torch_spyre.profiler.__all__ == ["get_diagnostic_report"]
    assert not hasattr(torch_spyre.profiler, "is_available")


def test_a_report_is_written_and_read_back(tmp_path, monkeypatch):
    from torch_spyre.profiler import get_diagnostic_report
    from torch_spyre.profiler._ffdc import CATEGORY_RUNTIME_LAUNCH, collect

    monkeypatch.setenv("TORCH_SPYRE_FFDC", "1")
    assert get_diagnostic_report(output_dir=str(tmp_path)) is None
    torch.ones(1, device="spyre")  # the runtime runs: the report says so
    try:
        raise RuntimeError("kernel 7 failed")
    except RuntimeError as e:
        report = collect(e, failure_category=CATEGORY_RUNTIME_LAUNCH, kernel_name="k7",
                         output_dir=str(tmp_path))
    path = Path(report["_report_path"])
    assert path.parent == tmp_path.resolve()
    assert re.fullmatch(r"ffdc_runtime_launch_\d{8}T\d{6}_\d{6}_\d+\.json", path.name)
    assert report["failure"]["exception_type"] == "RuntimeError"
    assert report["failure"]["message"] == "kernel 7 failed"
    assert report["failure"]["traceback"].endswith("RuntimeError: kernel 7 failed\n")
    assert report["runtime"] == {"kernel_name": "k7", "code_dir": None}
    assert report["hardware_state"] == {"spyre_available": True, "initialized": True,
                                        "device_state": "Ok"}
    assert report["collector"]["completeness_pct"] == 100.0
    assert report["collector"]["success"] is True
    assert get_diagnostic_report(output_dir=str(tmp_path)) == report
    assert json.loads(path.read_text())["failure"]["category"] == "runtime_launch"


def test_reports_are_off_unless_asked_and_written_once_per_failure(tmp_path, monkeypatch):
    from torch_spyre.profiler._ffdc import (CATEGORY_COMPILE_BACKEND, CATEGORY_COMPILE_FRONTEND,
                                            collect, try_collect)

    monkeypatch.delenv("TORCH_SPYRE_FFDC", raising=False)
    report = collect(None, output_dir=str(tmp_path))
    assert (report["_report_path"], report["collector"]["disabled"]) == (None, True)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("TORCH_SPYRE_FFDC", "1")
    try:
        raise ValueError("inner")
    except ValueError as inner:
        try_collect(inner, failure_category=CATEGORY_COMPILE_BACKEND, output_dir=str(tmp_path))
        try:
            raise RuntimeError("outer") from inner
        except RuntimeError as outer:
            try_collect(outer, failure_category=CATEGORY_COMPILE_FRONTEND, output_dir=str(tmp_path))
    names = [p.name for p in tmp_path.iterdir()]
    assert len(names) == 1 and names[0].startswith("ffdc_compile_backend_")
