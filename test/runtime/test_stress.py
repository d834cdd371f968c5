"""Issue 8, concurrency stress: the C++ stress program under the sanitizers
(test/stress/run_sanitizers.sh) and a Python stress of threads doing stream
contexts, copies, events and syncs with exact values."""

import os
import re
import subprocess
import sys
import time

import pytest

from conftest import progress_line, run_python

from _helpers import ROOT
SCRIPT = os.path.join(ROOT, "test", "stress", "run_sanitizers.sh")


@pytest.fixture(scope="module")
def sanitizer_run(request):
    """Build (incrementally, in build/stress) and run the stub and the stress
    program plain (8 x 10^5 operations), under TSAN and under ASAN+UBSan."""
    progress_line(request.config, "test_stress.py", "building and running the stress program "
                  "plain, under TSAN and under ASAN+UBSan (minutes)", time.monotonic())
    proc = subprocess.run(
        ["bash", SCRIPT, "plain", "tsan", "asan"],
        cwd=ROOT,
        env=dict(os.environ, PYTHON=sys.executable),  # the torch it builds against
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return proc


@pytest.mark.slow
@pytest.mark.timeout(1800)  # its own deadline is 1500 s
def test_sanitizers_report_nothing(sanitizer_run):
    out = sanitizer_run.stdout
    assert sanitizer_run.returncode == 0, out + sanitizer_run.stderr
    assert out.strip().splitlines()[-1] == "sanitizers: variants=plain tsan asan findings=0 failures=0"
    for variant in ("plain", "tsan", "asan"):
        for mode in ("lock-hold", "exit-queued", "exit-thread", "exit-during", "peer-windows"):
            assert re.search(rf"^\[{variant}\] {mode}: ok ", out, re.M), (variant, mode, out)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # its own deadline is 1500 s
def test_plain_stress_runs_the_full_count(sanitizer_run):
    out = sanitizer_run.stdout
    assert "[plain] stress 8x100000: ok" in out, out
    assert "stress: threads=8 ops_per_thread=100000 total_ops=800000" in out
    # Every variant: no check failed, no runtime call under the pool lock, all 9 faults.
    summaries = re.findall(r"stress: failures=(\d+) order_violations=(\d+) event_violations=(\d+) "
                           r"expected_errors=\d+ runtime_calls=(\d+) calls_under_pool_lock=(\d+)", out)
    assert len(summaries) == 3, out
    for failures, order, event, calls, under_lock in summaries:
        assert (failures, order, event, under_lock) == ("0", "0", "0", "0")
        assert int(calls) > 0
    assert out.count("faults: injected=9") == 3


@pytest.mark.slow  # the sanitizer builds and runs
@pytest.mark.timeout(1800)  # its own deadline is 1500 s
def test_readers_never_wait_for_stream_creation(sanitizer_run):
    # 64 creations of 20 ms each: readers complete resolutions while every
    # creation is in progress, and a probe takes the write lock meanwhile.
    lines = re.findall(r"lock-hold: creations=64 .* inside_creations=(\d+) .* probe=(\w+)",
                       sanitizer_run.stdout)
    assert len(lines) == 3, sanitizer_run.stdout
    for inside, probe in lines:
        assert probe == "ok" and int(inside) >= 640


@pytest.mark.slow  # the sanitizer builds and runs
@pytest.mark.timeout(1800)  # its own deadline is 1500 s
def test_a_stream_joining_a_capture_mid_launch_never_crashes(sanitizer_run):
    # 2 000 captures make a stream join them while another thread launches run-once work on
    # it; every graph that ended is replayed twice: each recorded work is replayable.
    out = sanitizer_run.stdout
    for variant in ("plain", "tsan", "asan"):
        assert re.search(rf"^\[{variant}\] capture-join 2x2000: ok ", out, re.M), (variant, out)
    runs = re.findall(r"capture-join: iterations=(\d+) ended=(\d+) unjoined=(\d+) launched=\d+ "
                      r"recorded=(\d+)", out)
    assert len(runs) == 3, out
    for iterations, ended, unjoined, recorded in runs:
        assert iterations == "2000" and int(ended) + int(unjoined) == 2000
        assert int(recorded) >= int(ended) > 0  # at least one op wholly inside each join
    assert out.count("capture-join: failures=0 ") == 3, out


@pytest.mark.slow  # the sanitizer builds and runs
@pytest.mark.timeout(1800)  # its own deadline is 1500 s
def test_the_hazard_tracker_orders_every_threads_launch(sanitizer_run):
    # Two threads launch reads on one stream behind a gated write, 2 000 times: none runs
    # before the write; and a launch that raised left no access to report against.
    out = sanitizer_run.stdout
    for variant in ("plain", "tsan", "asan"):
        assert re.search(rf"^\[{variant}\] hazard-order 2x2000: ok ", out, re.M), (variant, out)
    assert out.count("hazard-order: iterations=2000 early_reads=0 ") == 3, out
    assert out.count("hazard-order: failures=0 ") == 3, out


@pytest.mark.timeout(700)  # its own deadline is 600 s
def test_python_threads_streams_copies_and_syncs():
    proc = run_python(
        """
        import random, threading, torch
        THREADS, ITERATIONS = 8, 150
        barrier = threading.Barrier(THREADS)
        errors, counts = [], [[0] * 6 for _ in range(THREADS)]

        def check(got, expected):
            if not torch.equal(got, expected):
                raise AssertionError(f"got {got[:4].tolist()}..., expected {expected[:4].tolist()}...")

        def worker(t):
            rng = random.Random(t)
            own = torch.spyre.Stream(priority=-(t % 2))
            barrier.wait()
            try:
                for i in range(ITERATIONS):
                    v = float(t * 1000 + i)
                    s = own if rng.random() < 0.5 else torch.spyre.Stream()
                    op = rng.randrange(6)
                    counts[t][op] += 1
                    with s:
                        assert torch.spyre.current_stream() == s, (torch.spyre.current_stream(), s)
                        if op == 0:      # pageable H2D and D2H: blocking, exact
                            host = torch.arange(64, dtype=torch.float32) + v
                            check(host.to("spyre").cpu(), host)
                        elif op == 1:    # pinned, non-blocking, then a stream sync
                            host = torch.full((256,), v).pin_memory()
                            dev = torch.empty(256, device="spyre")
                            dev.copy_(host, non_blocking=True)
                            out = torch.empty(256).pin_memory()
                            out.copy_(dev, non_blocking=True)
                            s.synchronize()
                            check(out, torch.full((256,), v))
                        elif op == 2:    # device fill, D2D, an op via the CPU fallback
                            a = torch.full((32,), v, device="spyre")
                            check((a.clone() * 2).cpu(), torch.full((32,), 2 * v))
                        elif op == 3:    # hand-off to another stream through an event
                            other = torch.spyre.Stream(priority=-1)
                            a = torch.full((128,), v, device="spyre")
                            e = torch.Event(device="spyre")
                            e.record(s)
                            other.wait_event(e)
                            with other:
                                b = a.clone()
                                a.record_stream(other)
                            other.synchronize()
                            check(b.cpu(), torch.full((128,), v))
                        elif op == 4:    # device-wide synchronize from many threads
                            (torch.spyre.synchronize if i % 2 else torch.accelerator.synchronize)()
                        else:            # emulated work, a query, a stream sync
                            torch.spyre._sleep(0.05)
                            s.query()
                            s.synchronize()
                    assert torch.spyre.current_stream().stream_id == 0, torch.spyre.current_stream()
            except BaseException as e:
                errors.append(f"thread {t}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        [t.start() for t in threads]; [t.join() for t in threads]
        torch.spyre.synchronize()
        print(errors, sum(map(sum, counts)), min(map(min, zip(*counts))) > 0)
        """,
        timeout=600,
    )
    assert proc.stdout.split("\n")[0] == "[] 1200 True"
    assert proc.stderr == ""
