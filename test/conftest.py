"""Shared helpers and fixtures. The runtime binds one device once per process,
so anything that depends on how the runtime starts runs in a fresh process
(`run_python`); waits in tests have deadlines (`_helpers.wait_until`)."""

import faulthandler
import itertools
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

import _heartbeat

# Variables that change device enumeration, binding or thread placement; cleared for subprocesses
# so each test states exactly what it sets.
DEVICE_ENV = (
    "SPYRE_DEVICES",
    "SPYRE_VISIBLE_DEVICES",
    "AIU_WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "LOCAL_RANK",
    "FLEX_STUB_CARDS",
    "FLEX_STUB_ENGINES",
    "FLEX_STUB_DMA_GBPS",
    "FLEX_STUB_DMA_ENGINES",
    "FLEX_STUB_MEMORY_BYTES",
    "FLEX_STUB_FAULT_AFTER",
    "FLEX_STUB_TRACE",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "SPYRE_PIN_ENGINE_TEAMS",
    "OMP_PROC_BIND",
    "GOMP_CPU_AFFINITY",
    "TORCH_SPYRE_NUMERICS",
)

# Variables read only once the runtime starts (or later), never at `import torch`: a child of the
# fork server may set them (or unset them). Any other difference from the server's environment (OMP_*, GOMP_*,
# TORCH_DEVICE_BACKEND_AUTOLOAD, PYTHONPATH, ...) takes effect at import and needs a fresh interpreter.
RUNTIME_ENV = frozenset(DEVICE_ENV) - {
    "TORCH_DEVICE_BACKEND_AUTOLOAD", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY",  # act at import
} | {
    "TORCH_SPYRE_NUM_HOST_COMPUTE_STREAMS",
    "FLEX_STUB_TIMING",  # the card time model: read when the stub's context is created
    "FLEX_STUB_CARD_HOST_PREP_US",
    "SPYRECCL_STAGING",
    "SPYRECCL_CHECK",
    "PYTEST_CURRENT_TEST",
    # Set in this process by inductor once it compiled, read when it compiles.
    "TORCHINDUCTOR_CACHE_DIR",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
}


# Deadlines are budgets for an idle machine, multiplied by the load factor when they start: a
# test's (pytest-timeout's, and its teardown's), a subprocess's (run_python, torchrun) and a
# wait's (wait_until). The suite shares its machine (CI, other builds, its own xdist workers).
LOAD_FACTOR_CAP = 4.0


def load_factor():
    """How much slower than idle the machine runs now: the 1-minute load average per core the
    process may use, at least 1, at most LOAD_FACTOR_CAP."""
    cores = len(os.sched_getaffinity(0))
    return min(LOAD_FACTOR_CAP, max(1.0, os.getloadavg()[0] / cores))


def _child_env(env):
    full_env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    full_env.update(env or {})
    return full_env


def _fail_with_output(what, stdout, stderr):
    pytest.fail(f"{what}\n--- stdout\n{stdout}\n--- stderr\n{stderr}")


class _ForkServer:
    """An interpreter that has imported torch (and so torch_spyre) but not started the runtime,
    forked once per run_python call (test/_forkserver.py): the child skips `import torch`."""

    def __init__(self):
        self.env = _child_env(None)
        self.lock = threading.Lock()
        self.dir = tempfile.mkdtemp(prefix="spyre-forkserver-")
        request_r, self.request_w = os.pipe()
        self.reply_r, reply_w = os.pipe()
        source = open(os.path.join(os.path.dirname(__file__), "_forkserver.py")).read()
        log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", source, str(request_r), str(reply_w)],
            cwd=self.dir, env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            pass_fds=(request_r, reply_w))
        log.close()
        os.close(request_r)
        os.close(reply_w)
        self.replies = b""
        # False: the server failed
        self.ok = self._reply(time.monotonic() + 120 * load_factor()) == "ready"
        self.started = self.ok

    def _reply(self, deadline):
        """The next reply line, or None when the deadline passed or the server is gone."""
        while b"\n" not in self.replies:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.reply_r], [], [], left)[0]:
                return None
            chunk = os.read(self.reply_r, 4096)
            if not chunk:
                self.ok = False
                return None
            self.replies += chunk
        line, self.replies = self.replies.split(b"\n", 1)
        return line.decode()

    def import_time_differences(self, env):
        """The variables of `env` that differ from the server's and may act at import."""
        return sorted(k for k in env.keys() | self.env.keys()
                      if k not in RUNTIME_ENV and env.get(k) != self.env.get(k))

    def run(self, code, env, cwd, timeout):
        """(returncode, stdout, stderr, timed_out); None when the server failed to fork."""
        out = os.path.join(self.dir, "stdout")
        err = os.path.join(self.dir, "stderr")
        request = json.dumps({"code": code, "env": env, "cwd": cwd, "stdout": out, "stderr": err})
        os.write(self.request_w, request.encode() + b"\n")
        pid = self._reply(time.monotonic() + 60 * load_factor())
        if pid is None:
            self.ok = False
            return None
        pid = int(pid)
        status = self._reply(time.monotonic() + timeout)
        timed_out = status is None and self.ok
        if timed_out:
            for kill in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
                try:
                    kill()
                except OSError:
                    pass
            status = self._reply(time.monotonic() + 60 * load_factor())
        if status is None:
            self.ok = False
            status = "-9"
        with open(out, errors="replace") as f_out, open(err, errors="replace") as f_err:
            return int(status), f_out.read(), f_err.read(), timed_out

    def close(self):
        os.close(self.request_w)  # the server exits on end of input
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self.reply_r)


_server = None
_server_lock = threading.Lock()
# How run_python ran its code: {"fork server": n, "fresh: <why>": n}, reported after the run.
_runs = {}


def _count(how):
    with _server_lock:
        _runs[how] = _runs.get(how, 0) + 1


def _fork_server():
    global _server
    with _server_lock:
        # A test changed this process's environment (os.environ) since the server started: start
        # one with the new environment.
        changed = _server.import_time_differences(_child_env(None)) if _server else None
        if changed and _server.ok:
            _server.close()
            _server = None
            _runs[f"server restarted ({','.join(changed)})"] = _runs.get(
                f"server restarted ({','.join(changed)})", 0) + 1
        if _server is None or not _server.ok:
            if _server is not None:
                _server.close()
                if not _server.started:
                    return None  # it never started: fresh interpreters from here on
            _server = _ForkServer()
        return _server


def pytest_sessionfinish(session, exitstatus):
    if _server is not None:
        _server.close()
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: counts go to the controller
        session.config.workeroutput["run_python"] = dict(_runs)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: add up each worker's run_python counts."""
    for how, n in getattr(node, "workeroutput", {}).get("run_python", {}).items():
        _runs[how] = _runs.get(how, 0) + n


# Tests whose own deadline (timeout marker) is at least this long run for minutes.
LONG_TEST_DEADLINE = 600


def _deadline(item):
    marker = item.get_closest_marker("timeout")
    return marker.args[0] if marker is not None and marker.args else 0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test's deadline (its timeout marker, else --timeout, else pyproject.toml's) is for an
    idle machine: pytest-timeout, which runs after this, gets it multiplied by the load factor."""
    option = item.config.getoption("timeout", None)
    base = _deadline(item) or float(option if option is not None else
                                    item.config.getini("timeout") or 0)
    if base:
        item.add_marker(pytest.mark.timeout(round(base * load_factor())), append=False)
    yield


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist's worksteal scheduling (the README's test command) each worker first
    gets one contiguous share of the collection, in order. The files with tests that run for
    minutes are dealt out among the shares (longest first, to the share with the least so far)
    and start them, so that no worker runs them all one after the other or is left with one at
    the end. A file stays on one share (module fixtures run once); every worker orders the
    collection the same way (xdist requires it)."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or workers < 2:
        return
    long_paths = {item.path for item in items if _deadline(item) >= LONG_TEST_DEADLINE}
    long_files, rest = {}, []
    for item in items:
        if item.path in long_paths:
            long_files.setdefault(item.path, []).append(item)
        else:
            rest.append(item)
    shares = [[] for _ in range(workers)]
    weights = [0] * workers
    for group in sorted(long_files.values(), key=lambda g: -sum(map(_deadline, g))):
        k = weights.index(min(weights))
        shares[k].extend(group)
        weights[k] += sum(map(_deadline, group))
    # Fill each share to the size worksteal gives it: len(pending) // workers left.
    remaining, it = len(items), iter(rest)
    for k in range(workers):
        size = remaining // (workers - k)
        remaining -= size
        shares[k].extend(itertools.islice(it, max(0, size - len(shares[k]))))
    items[:] = [item for share in shares for item in share] + list(it)


_files_started = set()


def pytest_runtest_logstart(nodeid, location):
    """pytest-xdist's controller prints only dots: name each test file as a worker starts it."""
    # (A worker has workerinput; PYTEST_XDIST_WORKER would also be set in a pytest that a
    # worker's test starts.)
    if _terminal is None or hasattr(_terminal.config, "workerinput"):
        return
    if not getattr(_terminal.config.option, "numprocesses", None):
        return  # a serial run names its files itself
    path = nodeid.split("::")[0]
    if path not in _files_started:
        _files_started.add(path)
        # Past the dots already on the line (ensure_newline does not count them).
        if getattr(_terminal._tw, "width_of_current_line", 0):
            _terminal.write("\n")
        _terminal.write_line(f"{path} started")


_terminal = None


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    global _terminal
    _terminal = config.pluginmanager.get_plugin("terminalreporter")
    _heartbeat.register(config)


def pytest_terminal_summary(terminalreporter):
    if _runs:
        runs = ", ".join(f"{how}: {n}" for how, n in sorted(_runs.items()))
        terminalreporter.write_line(f"run_python: {runs}")


def run_python(code, env=None, timeout=120, check=True, fresh=False):
    """Run `code` as `python -c` would, in a new process (cwd: an empty temp dir).

    The process is a fork of an interpreter that has imported torch but not started the
    runtime, or with fresh=True (or an environment that acts at import) a fresh interpreter.
    Returns a CompletedProcess with stdout and stderr; with check=True a non-zero exit fails the
    test showing both; a timeout (for an idle machine: multiplied by load_factor()) kills it (and
    what it started) and fails the test showing both.
    """
    code = textwrap.dedent(code)
    timeout *= load_factor()
    full_env = _child_env(env)
    args = [sys.executable, "-c", code]
    with tempfile.TemporaryDirectory() as cwd:
        result = None
        why = "asked"
        if not fresh:
            server = _fork_server()
            differences = server.import_time_differences(full_env) if server else ["no server"]
            why = ",".join(differences)
            if not differences and server.lock.acquire(timeout=timeout):
                try:
                    result = server.run(code, full_env, cwd, timeout)
                finally:
                    server.lock.release()
                why = "server failed" if result is None else None
        _count("fork server" if why is None else f"fresh ({why})")
        if result is None:
            try:
                proc = subprocess.run(args, cwd=cwd, env=full_env, capture_output=True, text=True,
                                      timeout=timeout)
                result = proc.returncode, proc.stdout, proc.stderr, False
            except subprocess.TimeoutExpired as e:
                decode = lambda b: b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
                result = None, decode(e.stdout), decode(e.stderr), True
    returncode, stdout, stderr, timed_out = result
    if timed_out:
        _fail_with_output(f"subprocess timed out after {timeout:.0f} s", stdout, stderr)
    if check and returncode != 0:
        _fail_with_output(f"subprocess exited {returncode}", stdout, stderr)
    return subprocess.CompletedProcess(args, returncode, stdout, stderr)


# pytest-timeout stops a test's timer once the test has failed (its pytest_exception_interact
# hook), so a teardown that waits for a stream the failed test left behind a closed gate would
# hang the run. Teardowns get a deadline of their own: past it, every thread's stack is shown
# and the run ends (exit code 1) instead of stalling. 120 s on an idle machine, times the load
# factor; SPYRE_TEST_TEARDOWN_DEADLINE sets it exactly.
TEARDOWN_DEADLINE = 120


def _teardown_deadline():
    exact = os.environ.get("SPYRE_TEST_TEARDOWN_DEADLINE")
    return float(exact) if exact else TEARDOWN_DEADLINE * load_factor()


def _teardown_hung(item, seconds):
    capture = item.config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.suspend_global_capture(in_=True)
    sys.stderr.write(f"\n+++ teardown of {item.nodeid} still running after {seconds:.1f} s "
                     "(a wait for work a failed test left blocked?): ending the run +++\n")
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    seconds = _teardown_deadline()
    deadline = threading.Timer(seconds, _teardown_hung, args=(item, seconds))
    deadline.daemon = True
    deadline.start()
    try:
        yield
    finally:
        deadline.cancel()


@pytest.fixture
def drained_device():
    """The test starts with no device work pending and nothing cached, and ends with no device
    work pending (a gate left closed would hang here: the per-test timeout ends it)."""
    import torch

    torch.spyre.synchronize()
    torch.accelerator.empty_cache()
    yield
    torch.spyre.synchronize()


@pytest.fixture
def empty_device():
    """The test starts with no device memory held or cached and fresh accumulated stats,
    whatever ran before it: gc.collect() first frees the spyre tensors that reference cycles
    (tracebacks, optimizers) of earlier tests still hold."""
    import gc

    import torch

    gc.collect()
    torch.spyre.synchronize()
    torch.accelerator.empty_cache()
    torch.accelerator.empty_host_cache()
    assert torch.accelerator.memory_reserved() == 0, "a spyre tensor outlived its test"
    torch.accelerator.reset_accumulated_memory_stats()
    yield
    torch.spyre.synchronize()
    torch.accelerator.empty_cache()


# The test process itself runs with no device variables set: it binds device 0.
for _name in DEVICE_ENV:
    os.environ.pop(_name, None)


@pytest.fixture
def fresh_dynamo():
    """torch.compile tests: dynamo's caches emptied, the device idle, before and after."""
    import torch  # noqa: PLC0415 (conftest is imported before torch is wanted)

    torch._dynamo.reset()
    torch.spyre.synchronize()
    yield
    torch.spyre.synchronize()
    # Compiled functions outlive the test in dynamo's caches (module globals included), and
    # reduce-overhead's spyre graphs hold their pools' memory as long as they live.
    torch._dynamo.reset()


def progress_line(config, label, message, start):
    """Prints `label: message` on the terminal at once, past pytest's output capture, with the
    time since `start` (time.monotonic())."""
    elapsed = int(time.monotonic() - start)
    # stderr: a pytest-xdist worker's stdout does not reach the terminal, its stderr does.
    with config.pluginmanager.getplugin("capturemanager").global_and_fixture_disabled():
        print(f"\n    [{elapsed // 60}:{elapsed % 60:02d}] {label}: {message}", file=sys.stderr,
              flush=True)


@pytest.fixture
def progress(request):
    """For a test that runs for minutes: progress(message) prints a line on the terminal as the
    test runs, with the time since the test started."""
    start = time.monotonic()
    return lambda message: progress_line(request.config, request.node.name, message, start)


@pytest.fixture
def own_sanitizer_mode():
    """Sanitizer tests set the mode themselves (the suite may run with TORCH_SPYRE_SANITIZER=1):
    off before the test; after it off again, the device idle, and the suite's mode back."""
    import torch
    from torch_spyre import _C, sanitizer

    mode = _C._sanitizer_mode()
    sanitizer.disable()
    yield
    sanitizer.disable()
    torch.spyre.synchronize()
    _C._sanitizer_set_mode(mode)


@pytest.fixture(autouse=True)
def _sanitizer_off_for_intended_races(request):
    """A test marked `races` reads memory that queued work on another stream writes, on purpose
    (to show that the work has not run yet): with TORCH_SPYRE_SANITIZER=1 the stream sanitizer is
    off for it, and back on after."""
    if request.node.get_closest_marker("races") is None:
        yield
        return
    from torch_spyre import _C  # noqa: PLC0415

    mode = _C._sanitizer_mode()
    _C._sanitizer_set_mode(0)
    try:
        yield
    finally:
        _C._sanitizer_set_mode(mode)
