"""Diagnostic (FFDC) reports as upstream torch-spyre's tests expect them: which files
count as reports when reading, how collect() writes them (names, modes, fields), and
the public names (torch.spyre.get_diagnostic_report, make_spyre_module)."""

import json
import os
import re
import stat
import threading
from pathlib import Path

import pytest
import torch

import torch_spyre
from torch_spyre.profiler import _ffdc
from torch_spyre.profiler._ffdc import (
    CATEGORY_RUNTIME_LAUNCH,
    CATEGORY_UNKNOWN,
    _call_with_timeout,
    _name_category,
    _prune_old_reports,
    _report_sort_key,
    collect,
    get_diagnostic_report,
)

OLDER = "ffdc_unknown_20250101T000001_000000_1.json"
NEWER = "ffdc_compile_20250101T000002_000000_1.json"
VALID = '{"failure": {"category": "unknown"}}'


@pytest.fixture(autouse=True)
def _reports_on(monkeypatch):
    monkeypatch.setenv("TORCH_SPYRE_FFDC", "1")


def write(directory: Path, name: str, payload) -> Path:
    path = directory / name
    if isinstance(payload, bytes):
        path.write_bytes(payload)
    else:
        path.write_text(payload)
    return path


def newest_is_the_older_valid_one(directory: Path, get=get_diagnostic_report):
    """The newer file (also by mtime) is unusable: the older valid report is returned."""
    valid = write(directory, OLDER, VALID)
    os.utime(valid, (0, 0))
    report = get(output_dir=str(directory))
    assert report == {"failure": {"category": "unknown"}, "_report_path": str(valid.resolve())}


# ------------------------------------------------------------------ reading: what counts as a report

@pytest.mark.parametrize("payload", [
    "{}", "[]", "null", '"a string"', '{"failure": null}', '{"failure": []}',
    '{"failure": {}}', '{"failure": {"category": 42}}', '{"failure": {"category": ""}}',
    "{not json", b"\xff\xfe not utf-8", "",
    "[" * 100_000 + "]" * 100_000,  # deeper than any recursion limit
    '{"failure": ' * 5_000 + "1" + "}" * 5_000,
], ids=["empty-object", "list", "null", "string", "failure-null", "failure-list", "failure-empty",
        "category-int", "category-empty", "malformed", "not-utf8", "empty-file", "nested-lists",
        "nested-objects"])
def test_an_unusable_newest_report_is_skipped_for_the_newest_valid_one(tmp_path, payload):
    os.utime(write(tmp_path, NEWER, payload), (100, 100))
    newest_is_the_older_valid_one(tmp_path)


def test_deep_nesting_does_not_raise_recursion_error(tmp_path):
    write(tmp_path, NEWER, "[" * 100_000 + "]" * 100_000)
    assert get_diagnostic_report(output_dir=str(tmp_path)) is None


@pytest.mark.parametrize("name", [
    "ffdc_x_99999999T999999_999999_1.json",        # the shape, but no date
    "ffdc_unknown_20251301T000002_000000_1.json",  # month 13
    "ffdc_unknown_9999999T010101_123456_1.json",   # 7-digit date
    "ffdc_unknown_20250101T000002_00000_1.json",   # 5-digit microseconds
    "ffdc_unknown_٢٠٢٥٠١٠١T٠٠٠٠٠٢_000000_1.json",  # Arabic-Indic digits
    "ffdc_unknown_20250101T000002_000000_².json",  # a superscript digit as pid
    "ffdc_未知_20250101T000002_000000_1.json",      # a non-ASCII category
    "ffdc__20250101T000002_000000_1.json",         # no category
    "ffdc_unknown_20250101T000002_000000_1.json.tmp",
    "ffdc_unknown_20250101T000002_000000_1.JSON",
])
def test_a_file_whose_name_is_not_a_reports_is_ignored(tmp_path, name):
    assert _report_sort_key(name) is None
    os.utime(write(tmp_path, name, '{"failure": {"category": "compile"}}'), (100, 100))
    newest_is_the_older_valid_one(tmp_path)


def test_the_sort_key_is_the_time_in_the_name_whatever_the_category():
    assert _report_sort_key("ffdc_runtime_launch_20250101T000002_000123_77.json") == \
        "20250101T000002_000123"
    assert _report_sort_key(Path("/x/ffdc_a-b_20250101T000002_000123_7.json")) == \
        "20250101T000002_000123"


def test_a_symlink_named_as_the_newest_report_is_ignored(tmp_path):
    elsewhere = write(tmp_path, "other.json", '{"failure": {"category": "compile_frontend"}}')
    (tmp_path / NEWER).symlink_to(elsewhere)
    newest_is_the_older_valid_one(tmp_path)
    (tmp_path / "ffdc_unknown_20990101T000000_000000_1.json").symlink_to(tmp_path / "missing")
    newest_is_the_older_valid_one(tmp_path)  # a dangling one too


def test_a_fifo_named_as_the_newest_report_is_ignored_without_blocking(tmp_path):
    os.mkfifo(tmp_path / NEWER)  # opening it for reading the usual way would wait for a writer
    _call_with_timeout(lambda: newest_is_the_older_valid_one(tmp_path), 60)


def test_a_fifo_swapped_in_after_the_check_is_refused_on_what_was_opened(tmp_path, monkeypatch):
    # the entry changes between the lstat and the open: the open must not block either
    monkeypatch.setattr(_ffdc, "_is_regular_file", lambda path: True)
    os.mkfifo(tmp_path / NEWER)
    _call_with_timeout(lambda: newest_is_the_older_valid_one(tmp_path), 60)
    (tmp_path / "ffdc_unknown_20990101T000000_000000_1.json").symlink_to(tmp_path / OLDER)
    newest_is_the_older_valid_one(tmp_path)  # and a symlink is not followed (O_NOFOLLOW)


def test_a_directory_named_as_the_newest_report_is_ignored(tmp_path):
    (tmp_path / NEWER).mkdir()
    newest_is_the_older_valid_one(tmp_path)


def test_no_directory_or_no_report_gives_none(tmp_path):
    assert get_diagnostic_report(output_dir=str(tmp_path / "missing")) is None
    write(tmp_path, OLDER, "{bad json")
    assert get_diagnostic_report(output_dir=str(tmp_path)) is None


# ------------------------------------------------------------------ writing

def test_an_empty_category_is_written_as_unknown(tmp_path):
    report = collect(ValueError("x"), failure_category="", output_dir=str(tmp_path))
    assert report["failure"]["category"] == "unknown"
    assert Path(report["_report_path"]).name.startswith("ffdc_unknown_")
    assert get_diagnostic_report(output_dir=str(tmp_path))["failure"]["category"] == "unknown"


def test_a_non_ascii_category_is_kept_in_the_report_and_replaced_in_the_name(tmp_path):
    assert _name_category("未知") == "__"
    assert _name_category("a b/c-d_e") == "a_b_c-d_e"
    assert _name_category("x" * 40) == "x" * 32
    report = collect(None, failure_category="未知", output_dir=str(tmp_path))
    assert re.fullmatch(r"ffdc_(__)_\d{8}T\d{6}_\d{6}_\d+\.json", Path(report["_report_path"]).name)
    read = get_diagnostic_report(output_dir=str(tmp_path))
    assert read["failure"]["category"] == "未知"  # the name is readable back as a report
    assert read["_report_path"] == report["_report_path"]


@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077])
def test_a_created_directory_is_0700_and_the_report_0600_whatever_the_umask(tmp_path, umask):
    out = tmp_path / "a" / "ffdc"
    previous = os.umask(umask)
    try:
        report = collect(None, output_dir=str(out))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    assert [p.name for p in out.iterdir()] == [Path(report["_report_path"]).name]
    assert stat.S_IMODE(Path(report["_report_path"]).stat().st_mode) == 0o600


def test_an_existing_directory_keeps_its_mode(tmp_path):
    os.chmod(tmp_path, 0o755)
    report = collect(None, output_dir=str(tmp_path))
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    assert stat.S_IMODE(Path(report["_report_path"]).stat().st_mode) == 0o600


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def disk_full(report, file):
        file.write("{")
        raise OSError("disk full")

    monkeypatch.setattr(_ffdc, "_dump_json", disk_full)
    report = collect(None, output_dir=str(tmp_path))
    assert report["_report_path"] is None
    assert report["collector"]["success"] is False
    assert report["collector"]["collector_errors"] == ["write: disk full"]
    assert list(tmp_path.iterdir()) == []


def test_latency_and_spyre_inductor_log_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("SPYRE_INDUCTOR_LOG", "1")
    monkeypatch.setenv("SPYRE_HAZARD_TRACKER", "0")
    monkeypatch.delenv("TORCH_SPYRE_SANITIZER", raising=False)
    report = collect(RuntimeError("x"), failure_category=CATEGORY_RUNTIME_LAUNCH,
                     output_dir=str(tmp_path))
    latency = report["collector"]["capture_latency_ms"]
    assert isinstance(latency, float) and latency > 0
    assert list(report["collector"]) == ["capture_latency_ms", "missing_fields", "collector_errors",
                                         "success", "completeness_pct"]
    env = report["environment"]
    assert (env["SPYRE_INDUCTOR_LOG"], env["SPYRE_HAZARD_TRACKER"], env["TORCH_SPYRE_SANITIZER"]) == \
        ("1", "0", "")
    on_disk = json.loads(Path(report["_report_path"]).read_text())
    assert on_disk["collector"]["capture_latency_ms"] == latency
    assert on_disk["environment"]["SPYRE_INDUCTOR_LOG"] == "1"


def test_completeness_counts_the_ten_required_fields_of_upstreams_newest_test(tmp_path):
    # Upstream's newest tests/profiler/test_ffdc.py: SPYRE_INDUCTOR_LOG is recorded, not
    # required (ten fields); without an exception two are missing: round(100 * 8 / 10, 1).
    assert len(_ffdc.REQUIRED_FIELDS) == 10
    assert "environment.SPYRE_INDUCTOR_LOG" not in _ffdc.REQUIRED_FIELDS
    report = collect(None, failure_category=CATEGORY_UNKNOWN, output_dir=str(tmp_path))
    assert report["collector"]["missing_fields"] == ["failure.exception_type", "failure.traceback"]
    assert report["collector"]["completeness_pct"] == 80.0


def test_pruning_keeps_the_newest_reports_and_leaves_other_files(tmp_path):
    names = [f"ffdc_{c}_20250101T00000{i}_000000_1.json"
             for i, c in enumerate(["unknown", "runtime_launch", "compile", "compile", "compile"])]
    for i, name in enumerate(names):
        os.utime(write(tmp_path, name, VALID), (100 - i, 100 - i))  # mtimes say the opposite
    write(tmp_path, "notes.json", "{}")
    (tmp_path / "ffdc_unknown_20000101T000000_000000_1.json").symlink_to(tmp_path / "notes.json")
    _prune_old_reports(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        names[2:] + ["notes.json", "ffdc_unknown_20000101T000000_000000_1.json"])


def test_call_with_timeout_returns_raises_and_times_out():
    assert _call_with_timeout(lambda: 7, 60) == 7
    with pytest.raises(KeyError, match="'k'"):
        _call_with_timeout(lambda: {}["k"], 60)
    gate = threading.Event()

    def held():
        gate.wait(60)
        return 1

    held.__name__ = "held"
    try:
        with pytest.raises(TimeoutError, match=r"^held did not finish within 0.01 s$"):
            _call_with_timeout(held, 0.01)
    finally:
        gate.set()


# ------------------------------------------------------------------ public names

def test_torch_spyre_get_diagnostic_report_reads_the_newest_report(tmp_path):
    assert torch.spyre.get_diagnostic_report(output_dir=str(tmp_path)) is None
    try:
        raise ValueError("public api")
    except ValueError as e:
        written = collect(e, output_dir=str(tmp_path))
    assert torch.spyre.get_diagnostic_report(output_dir=str(tmp_path)) == written
    assert written["failure"]["message"] == "public api"
    assert torch.spyre.get_diagnostic_report(str(tmp_path)) == written


def test_make_spyre_module_is_the_device_module_torch_registers():
    from torch_spyre import make_spyre_module

    assert make_spyre_module() is torch.spyre is torch_spyre
    assert make_spyre_module() is make_spyre_module()
    assert torch.get_device_module("spyre") is make_spyre_module()


def test_the_made_module_skips_a_newer_unusable_report(tmp_path):
    from torch_spyre import make_spyre_module

    os.utime(write(tmp_path, NEWER, "{}"), (100, 100))
    newest_is_the_older_valid_one(tmp_path, get=make_spyre_module().get_diagnostic_report)


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
