"""Diagnostic reports (FFDC, first failure data capture), as upstream torch-spyre writes them.

`collect(exc, failure_category=...)` writes one JSON report about a failure:
metadata (time, versions), the failure (category, exception, traceback), the
environment variables that change what torch-spyre does, compiler artifacts
found, the kernel involved, and the device state (read without starting the
runtime). Reports are written only when TORCH_SPYRE_FFDC=1; collecting never
raises. `get_diagnostic_report()` returns the newest usable report.

File names: ffdc_<category>_<YYYYmmddTHHMMSS>_<microseconds>_<pid>.json, in
<inductor cache dir>/torch-spyre/ffdc_reports unless `output_dir` is given; at
most _MAX_REPORTS are kept (oldest removed first). Reports hold tracebacks and
environment values: a directory collect() creates is 0700, every report 0600.
Reading trusts nothing in the directory: only regular files (no symlinks, FIFOs
or devices) whose names have that exact shape, holding a JSON object with a
`failure` object whose `category` is a non-empty string, count as reports.
"""

import json
import os
import platform
import re
import stat
import sys
import tempfile
import threading
import time
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
# A report is a few KiB; a larger file is not one of ours and is not read.
_MAX_REPORT_BYTES = 16 << 20
# The artifact search walks directories, which can stall on a slow mount: the
# report is written without it after this long (upstream's bound).
_ARTIFACT_SEARCH_TIMEOUT_S = 2.0
# SPYRE_INDUCTOR_LOG is upstream's compiler log switch: recorded so reports
# read the same as upstream's.
_ENV_KEYS = (
    "TORCH_COMPILE_DEBUG", "TORCH_SPYRE_DEBUG", "SPYRE_INDUCTOR_LOG", "TORCH_LOGS",
    "TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS", "TORCH_SPYRE_DOWNCAST_WARN", "TORCH_SPYRE_SANITIZER",
    "SPYRE_HAZARD_TRACKER", "LOCAL_RANK", "SPYRE_DEVICES", "AIU_WORLD_SIZE",
    "LOCAL_WORLD_SIZE", "FLEX_STUB_CARDS", "FLEX_STUB_ENGINES",
)
# ffdc_<category>_<date>T<time>_<microseconds>_<pid>.json, ASCII only ([0-9], not \d:
# other scripts' digits would pass isdigit()).
_REPORT_NAME = re.compile(r"ffdc_[A-Za-z0-9_-]+_([0-9]{8}T[0-9]{6})_([0-9]{6})_[0-9]+\.json")
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


def _report_sort_key(path) -> Optional[str]:
    """The UTC time in a report's name ("YYYYmmddTHHMMSS_ffffff", which sorts as the time
    does, whatever the category), or None when the name is not a report's."""
    match = _REPORT_NAME.fullmatch(Path(path).name)
    if match is None:
        return None
    key = f"{match[1]}_{match[2]}"
    try:
        datetime.strptime(key, "%Y%m%dT%H%M%S_%f")
    except ValueError:  # 99999999T999999 has the shape but is no time
        return None
    return key


def _reports_newest_first(directory: Path) -> list:
    """The entries of `directory` named as reports, newest first (an unreadable or
    missing directory has none). Only names are looked at here: see _read_report."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    keyed = [(key, directory / name) for name in names
             if (key := _report_sort_key(name)) is not None]
    keyed.sort(key=lambda entry: entry[0], reverse=True)
    return [path for _, path in keyed]


def _is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _prune_old_reports(directory: Path, keep: int) -> None:
    """Remove all but the newest `keep` reports (by the time in their names); files
    that are not reports (other names, symlinks) are left alone."""
    reports = [path for path in _reports_newest_first(Path(directory)) if _is_regular_file(path)]
    for old in reports[keep:]:
        old.unlink(missing_ok=True)


def _read_report(path: Path) -> Optional[dict]:
    """The report in `path`, or None when it is not a usable one. Opened without
    following a symlink and without blocking (a FIFO opens at once and is refused);
    a JSON nested too deeply to parse is refused like a malformed one."""
    if not _is_regular_file(path):  # not even opened: a device node could act on open
        return None
    # Checked again on what was opened: the entry can change in between.
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # a symlink (ELOOP), gone, or unreadable
        return None
    try:
        with open(fd, "rb") as file:  # closes fd
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_REPORT_BYTES:
                return None
            data = file.read(_MAX_REPORT_BYTES + 1)
    except OSError:
        return None
    try:
        report = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deeply
        return None
    if not isinstance(report, dict):
        return None
    failure = report.get("failure")
    if not isinstance(failure, dict):
        return None
    category = failure.get("category")
    if not isinstance(category, str) or not category:
        return None
    return report


def _call_with_timeout(fn, timeout_s: float):
    """fn() on a daemon thread: its result, or its exception re-raised, or TimeoutError
    when it has not returned after `timeout_s` seconds (the thread is left to finish;
    being a daemon, it never holds up the interpreter's exit)."""
    outcome = []

    def run():
        try:
            outcome.append((True, fn()))
        except BaseException as e:  # handed to the caller
            outcome.append((False, e))

    worker = threading.Thread(target=run, name="torch-spyre-ffdc", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not outcome:
        raise TimeoutError(f"{getattr(fn, '__name__', fn)!s} did not finish within {timeout_s} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


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
    """Write a report about `exc` (None: a manual report) and return it; never raises.
    An empty category is reported as CATEGORY_UNKNOWN."""
    started = time.perf_counter()
    errors = []
    if not isinstance(failure_category, str) or not failure_category:
        failure_category = CATEGORY_UNKNOWN

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
        "artifacts": section("artifacts", lambda: _call_with_timeout(
            _artifacts, _ARTIFACT_SEARCH_TIMEOUT_S)),
        "runtime": {"kernel_name": kernel_name or None, "code_dir": code_dir or None},
        "hardware_state": section("hardware_state", _device_state),
    }
    missing = []
    for field in REQUIRED_FIELDS:
        name, key = field.split(".", 1)
        if report[name].get(key) is None:
            missing.append(field)
    report["collector"] = {
        "capture_latency_ms": round((time.perf_counter() - started) * 1000, 3),
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
        _make_private_dir(directory)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S_%f")
        path = directory / f"ffdc_{_name_category(failure_category)}_{stamp}_{os.getpid()}.json"
        _write_private(path, report)
        report["_report_path"] = str(path.resolve())
        _prune_old_reports(directory, _MAX_REPORTS)
    except Exception as e:
        report["collector"]["collector_errors"].append(f"write: {e}")
        report["collector"]["success"] = False
    return report


def _name_category(category: str) -> str:
    """The category as it appears in a file name: ASCII letters, digits, '_' and '-'."""
    return "".join(c if (c.isascii() and c.isalnum()) or c in "_-" else "_" for c in category)[:32]


def _make_private_dir(directory: Path) -> None:
    """Create `directory` 0700 (whatever the umask); an existing one is left as it is."""
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        return
    os.chmod(directory, 0o700)


def _dump_json(report: dict, file) -> None:
    json.dump(report, file, indent=2, default=str)


def _write_private(path: Path, report: dict) -> None:
    """Write the report 0600 to a temporary file renamed into place, so a reader never
    sees half a report; the temporary file is removed if writing fails."""
    temporary = path.with_name(f"{path.name}.{threading.get_ident()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            fd = None  # the file object closes it
            _dump_json(report, file)
        os.replace(temporary, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        temporary.unlink(missing_ok=True)
        raise


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
    """The newest usable report (by the time in its name) as a dict with `_report_path`
    (absolute), or None when there is none. Files that are not usable reports (see the
    module docstring) are skipped for the next newest; reading never blocks."""
    directory = Path(output_dir) if output_dir else _default_output_dir()
    for path in _reports_newest_first(directory):
        report = _read_report(path)
        if report is not None:
            report["_report_path"] = str(path.resolve())
            return report
    return None
