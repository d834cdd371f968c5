"""A progress line when the run has been quiet: "[mm:ss] N/M tests done, running: <nodeids>".

pytest-xdist's controller prints a dot per finished test and nothing while tests run, so a stretch
of long tests (builds, torchrun jobs, the sanitizer rerun) left the terminal silent for minutes.
Every SPYRE_TEST_HEARTBEAT seconds (30 by default; 0: off) in which no test finished, the
controller (or a run without xdist) prints this line. conftest.py registers the plugin.
"""

import os
import threading
import time

import pytest

INTERVAL_ENV = "SPYRE_TEST_HEARTBEAT"


class Heartbeat:
    def __init__(self, interval):
        self.interval = interval
        self.lock = threading.Lock()
        self.running = {}  # nodeid -> None, in start order
        self.done = 0
        self.total = None
        self.last_finish = time.monotonic()
        self.start = None
        self.stop = threading.Event()
        self.thread = None
        # The terminal as it is now, before pytest's capture takes fd 1 during a test: the
        # line must reach it from a thread, whatever the main thread is capturing.
        self.fd = os.dup(1)

    def line(self, now):
        with self.lock:
            running = ", ".join(self.running) or "nothing (between tests)"
            done, total = self.done, self.total
        elapsed = int(now - self.start)
        total = "?" if total is None else total
        return f"\n[{elapsed // 60:02d}:{elapsed % 60:02d}] {done}/{total} tests done, running: {running}\n"

    def beat(self):
        while not self.stop.wait(self.interval / 4):
            now = time.monotonic()
            with self.lock:
                quiet = now - self.last_finish >= self.interval
            if quiet:
                os.write(self.fd, self.line(now).encode())
                with self.lock:
                    self.last_finish = now  # the next line one interval later at the earliest

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.total = len(ids)  # every worker collects the same tests

    def pytest_collection_finish(self, session):
        if self.total is None and not session.config.pluginmanager.hasplugin("dsession"):
            self.total = len(session.items)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session):
        self.start = self.last_finish = time.monotonic()
        self.thread = threading.Thread(target=self.beat, name="heartbeat", daemon=True)
        self.thread.start()
        yield

    def pytest_runtest_logstart(self, nodeid, location):
        with self.lock:
            self.running[nodeid] = None

    def pytest_runtest_logfinish(self, nodeid, location):
        with self.lock:
            self.running.pop(nodeid, None)
            self.done += 1
            self.last_finish = time.monotonic()

    def pytest_unconfigure(self, config):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
        os.close(self.fd)


def register(config):
    """Registers the heartbeat in pytest's controller process (not in an xdist worker, whose
    output the controller does not show), unless SPYRE_TEST_HEARTBEAT is 0."""
    interval = float(os.environ.get(INTERVAL_ENV, "30"))
    if interval > 0 and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Heartbeat(interval), "spyre-heartbeat")
