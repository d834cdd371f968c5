"""Diagnostic reports (FFDC, first failure data capture), as upstream torch-spyre writes them.

`collect(exc, failure_category=...)` writes one JSON report about a failure:
metadata (time, versions), the failure (category, exception, traceback), the
environment variables that change what torch-spyre does, compiler artifacts
found, the kernel involved, and the device state (read without starting the
runtime). Reports are written only when TORCH_SPYRE_FFDC=1; collecting never
raises. `get_diagnostic_report()` returns the newest readable report.

File names: ffdc_<category>_<YYYYmmddTHHMMSS>_<microseconds>_<pid>.json, in
<inductor cache dir>/torch-spyre/ffdc_reports unless `output_dir` is given; at
most _MAX_REPORTS are kept (oldest removed first).
"""

import json
import os
import platform
import sys
import tempfile
import traceback
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

CATEGORY_COMPILE_FRONTEND = "compile_frontend"
CATEGORY_COMPILE_BACKEND = "compile_backend"
CATEGORY_RUNTIME_LAUNCH = "runtime_launch"
CATEGORY_UNIMPLEMENTED = "unimplemented"
CATEGORY_UNKNOWN = "unknown"

# A report is complete when all of these are filled (collector.completeness_pct).
REQUIRED_FIELDS = [
    "metadata.timestamp",
    "metadata.torch_version",
    "metadata.python_version",
    "failure.category",
    "failure.exception_type",
    "failure.message",
    "failure.traceback",
    "environment.TORCH_COMPILE_DEBUG",
    "environment.TORCH_SPYRE_DEBUG",
    "artifacts.searched",
]

_MAX_REPORTS = 50
_ENV_KEYS = (
    "TORCH_COMPILE_DEBUG", "TORCH_SPYRE_DEBUG", "TORCH_LOGS", "TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS",
    "TORCH_SPYRE_DOWNCAST_WARN", "LOCAL_RANK", "SPYRE_DEVICES", "AIU_WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "FLEX_STUB_CARDS", "FLEX_STUB_ENGINES",
)
# Exceptions already reported, so an outer handler does not report them again:
# marked by an attribute, or (an exception that refuses attributes) in a WeakSet.
_MARK = "_torch_spyre_ffdc_reported"
_reported = weakref.WeakSet()


def _mark(exc: BaseException) -> None:
    try:
        setattr(exc, _MARK, True)
    except Exception:
        try:
            _reported.add(exc)
        except Exception:
            pass


def _marked(exc: BaseException) -> bool:
    try:
        if getattr(exc, _MARK, False) is True:
            return True
        return exc in _reported
    except Exception:  # unhashable or not weak-referenceable
        return False


def _enabled() -> bool:
    return os.environ.get("TORCH_SPYRE_FFDC", "0") == "1"


def _default_output_dir() -> Path:
    try:
        from torch._inductor.runtime.runtime_utils import cache_dir

        return Path(cache_dir()) / "torch-spyre" / "ffdc_reports"
    except Exception:
        return Path(tempfile.gettempdir()) / "torch-spyre-ffdc"


def _report_sort_key(path: Path) -> str:
    # ffdc_<category>_<date>_<usec>_<pid>: the time, whatever the category.
    parts = path.stem.rsplit("_", 3)
    return f"{parts[1]}_{parts[2]}" if len(parts) == 4 else ""


def _prune_old_reports(directory: Path, keep: int) -> None:
    reports = sorted(directory.glob("ffdc_*.json"), key=_report_sort_key, reverse=True)
    for old in reports[keep:]:
        old.unlink(missing_ok=True)


def _artifacts() -> dict:
    """The newest torch_compile_debug run's graph and code files under the working directory."""
    found = []
    debug = Path.cwd() / "torch_compile_debug"
    runs = sorted((d for d in debug.glob("run_*") if d.is_dir()), key=lambda d: d.stat().st_mtime)
    if runs:
        for pattern in ("fx_graph_readable.py", "output_code.py", "ir_post_fusion.txt"):
            found += [str(p) for p in runs[-1].rglob(pattern)][:5]
    return {"searched": True, "found_count": len(found), "paths": found[:20]}


def _device_state() -> dict:
    """What the process knows of the device, without starting the runtime."""
    import torch_spyre

    return {
        "spyre_available": torch_spyre.is_available(),
        "initialized": torch_spyre.is_initialized(),
        "device_state": torch_spyre.get_device_state().name,
    }


def collect(exc: Optional[BaseException] = None, failure_category: str = CATEGORY_UNKNOWN,
            kernel_name: Optional[str] = None, code_dir: Optional[str] = None,
            output_dir: Optional[str] = None) -> dict:
    """Write a report about `exc` (None: a manual report) and return it; never raises."""
    errors = []

    def section(name, build):
        try:
            return build()
        except Exception as e:  # a report is best effort: note what failed
            errors.append(f"{name}: {e}")
            return {}

    import torch

    report = {
        "metadata": section("metadata", lambda: {
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "host": platform.node(),
            "pid": os.getpid(),
            "python_version": sys.version,
            "torch_version": torch.__version__,
            "platform": platform.platform(),
        }),
        "failure": section("failure", lambda: {
            "category": failure_category,
            "exception_type": None if exc is None else type(exc).__name__,
            "message": "manual collection (no exception)" if exc is None else str(exc),
            "traceback": None if exc is None else "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)),
            "file": None if exc is None or exc.__traceback__ is None
            else traceback.extract_tb(exc.__traceback__)[-1].filename,
            "lineno": None if exc is None or exc.__traceback__ is None
            else traceback.extract_tb(exc.__traceback__)[-1].lineno,
        }),
        "environment": section("environment", lambda: {k: os.environ.get(k, "") for k in _ENV_KEYS}),
        "artifacts": section("artifacts", _artifacts),
        "runtime": {"kernel_name": kernel_name or None, "code_dir": code_dir or None},
        "hardware_state": section("hardware_state", _device_state),
    }
    missing = []
    for field in REQUIRED_FIELDS:
        name, key = field.split(".", 1)
        if report[name].get(key) is None:
            missing.append(field)
    report["collector"] = {
        "missing_fields": missing,
        "collector_errors": errors,
        "success": not errors,
        "completeness_pct": round(100 * (len(REQUIRED_FIELDS) - len(missing)) / len(REQUIRED_FIELDS), 1),
    }
    report["_report_path"] = None
    if not _enabled():
        report["collector"]["disabled"] = True
        return report
    try:
        directory = Path(output_dir) if output_dir else _default_output_dir()
        directory.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S_%f")
        category = "".join(c if c.isalnum() or c in "_-" else "_" for c in failure_category)[:32]
        path = directory / f"ffdc_{category}_{stamp}_{os.getpid()}.json"
        path.write_text(json.dumps(report, indent=2, default=str))
        report["_report_path"] = str(path.resolve())
        _prune_old_reports(directory, _MAX_REPORTS)
    except Exception as e:
        report["collector"]["collector_errors"].append(f"write: {e}")
        report["collector"]["success"] = False
    return report


def _already_reported(exc: BaseException) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if _marked(exc):
            return True
        if exc.__cause__ is not None and _already_reported(exc.__cause__):
            return True
        exc = exc.__context__
    return False


def try_collect(exc: BaseException, failure_category: str = CATEGORY_UNKNOWN, logger=None,
                **kwargs) -> None:
    """collect() for an exception handler: never raises, and reports an exception (or one it
    was raised from) only once, under the innermost handler's category."""
    try:
        if _already_reported(exc):
            return
        _mark(exc)
        report = collect(exc, failure_category=failure_category, **kwargs)
        if logger is not None and report.get("_report_path"):
            logger.warning("torch-spyre diagnostic report: %s", report["_report_path"])
    except Exception:
        pass


def get_diagnostic_report(output_dir: Optional[str] = None) -> Optional[dict]:
    """The newest readable report (by the time in its name) as a dict with `_report_path`,
    or None when there is none."""
    directory = Path(output_dir) if output_dir else _default_output_dir()
    for path in sorted(directory.glob("ffdc_*.json"), key=_report_sort_key, reverse=True):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict):
            report["_report_path"] = str(path.resolve())
            return report
    return None
