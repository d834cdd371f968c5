"""Issue 8, bad input: every row gives a clear exception of the expected type
whose message names the bad value; none crashes the process or hangs.

The API rows run in one fresh child process (a crash would otherwise take the
test runner with it) with a per-row watchdog; the environment rows run one
child each, in parallel, since the runtime reads its variables once.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import run_python

# (id, code run in the child, exception type name, text the message must contain)
API_ROWS = [
    # ---- device strings and indices
    ("device-str-cuda", "torch.spyre.Stream(device='cuda')", "ValueError",
     "expected a spyre device, got 'cuda'"),
    ("device-obj-cpu", "torch.spyre.Stream(device=torch.device('cpu'))", "ValueError",
     "expected a spyre device, got 'cpu'"),
    ("device-str-garbage", "torch.spyre.Stream(device='spyre:x')", "ValueError",
     "Invalid device string 'spyre:x'"),
    ("device-str-empty", "torch.spyre.Stream(device='')", "ValueError", "Invalid device string ''"),
    ("device-str-negative", "torch.spyre.Stream(device='spyre:-1')", "ValueError",
     "Invalid device string 'spyre:-1'"),
    ("device-int-huge", "torch.spyre.Stream(device=2**40)", "RuntimeError",
     "Invalid device index 1099511627776: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("device-int-128", "torch.spyre.Stream(device=128)", "RuntimeError",
     "Invalid device index 128: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("device-float", "torch.spyre.Stream(device=1.5)", "TypeError", "got 1.5 of type float"),
    ("device-bool", "torch.spyre.Stream(device=True)", "TypeError", "got True of type bool"),
    ("device-list", "torch.spyre.Stream(device=[0])", "TypeError", "got [0] of type list"),
    # torch.device narrows 'spyre:300' to spyre:44 unchecked; the string is checked
    ("device-str-300", "torch.spyre.Stream(device='spyre:300')", "RuntimeError",
     "Invalid device index 300: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("device-str-256", "torch.spyre.synchronize('spyre:256')", "RuntimeError",
     "Invalid device index 256: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("device-str-127", "torch.spyre.Stream(device='spyre:127')", "RuntimeError",
     "Invalid device index 127: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("device-str-cuda-300", "torch.spyre.Stream(device='cuda:300')", "ValueError",
     "expected a spyre device, got 'cuda:300'"),
    # torch.Stream(stream_id, device_index, device_type) narrows without asking the backend
    ("torch-stream-index-300", "torch.Stream(stream_id=0, device_index=300, device_type=T)",
     "RuntimeError", "Invalid device index 300: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("torch-stream-index-256", "torch.Stream(0, 256, T)", "RuntimeError",
     "Invalid device index 256: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("torch-stream-index-128", "torch.Stream(0, device_index=128, device_type=T)", "RuntimeError",
     "Invalid device index 128: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("torch-stream-index-negative", "torch.Stream(0, -2, T)", "ValueError",
     "Invalid device index -2: expected -1 (the current device) or an index in [0, 8)"),
    ("torch-stream-index-huge", "torch.Stream(0, 2**70, T)", "RuntimeError",
     "Invalid device index 1180591620717411303424: out of range for 8 visible"),
    ("torch-stream-subclass-300", "type('S', (torch.Stream,), {})(0, 300, T)", "RuntimeError",
     "Invalid device index 300: out of range for 8 visible"),
    ("device-not-bound", "torch.spyre.Stream(device=1)", "RuntimeError",
     "this process is bound to spyre:0 but spyre:1 was requested"),
    # eight cards are visible (FLEX_STUB_CARDS' default): 8 is the first invalid index
    ("set-device-out-of-range", "torch.spyre.set_device(8)", "RuntimeError",
     "Invalid device index 8: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("set-device-none", "torch.spyre.set_device(None)", "ValueError",
     "expected a spyre device, got None"),
    ("set-device-cpu", "torch.spyre.set_device('cpu')", "ValueError",
     "expected a spyre device, got 'cpu'"),
    ("set-device-raw-300", "torch.spyre._C.set_device(300)", "RuntimeError",
     "Invalid device index 300: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("synchronize-other-device", "torch.spyre.synchronize('spyre:7')", "RuntimeError",
     "but spyre:7 was requested"),
    ("synchronize-float", "torch.spyre.synchronize(2.5)", "TypeError", "got 2.5 of type float"),
    ("current-stream-meta", "torch.spyre.current_stream('meta')", "ValueError",
     "expected a spyre device, got 'meta'"),
    ("default-stream-other-device", "torch.spyre.default_stream(7)", "RuntimeError",
     "but spyre:7 was requested"),
    ("default-stream-out-of-range", "torch.spyre.default_stream(9)", "RuntimeError",
     "Invalid device index 9: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("tensor-other-device", "torch.empty(2, device='spyre:3')", "RuntimeError",
     "Only one Spyre device per process is supported: this process is bound to spyre:0 but "
     "spyre:3 was requested (run one process per device, e.g. with torchrun)"),
    ("tensor-out-of-range", "torch.empty(2, device='spyre:8')", "RuntimeError",
     "Invalid device index 8: out of range for 8 visible Spyre device(s) "
     "(expected an index in [0, 8))"),
    ("properties-out-of-range", "torch.spyre.get_device_properties(8)", "RuntimeError",
     "Invalid device index 8: out of range for 8 visible Spyre device(s)"),
    ("capability-out-of-range", "torch.spyre.get_device_capability(8)", "RuntimeError",
     "Invalid device index 8: out of range for 8 visible Spyre device(s)"),
    ("accelerator-sync-other-device", "torch.accelerator.synchronize(5)", "RuntimeError",
     "but spyre:5 was requested"),
    # ---- priorities of the wrong type
    ("priority-str", "torch.spyre.Stream(priority='high')", "TypeError",
     "priority must be an int, got 'high' of type str"),
    ("priority-float", "torch.spyre.Stream(priority=1.0)", "TypeError",
     "priority must be an int, got 1.0 of type float"),
    ("priority-bool", "torch.spyre.Stream(priority=True)", "TypeError",
     "priority must be an int, got True of type bool"),
    ("priority-none", "torch.spyre.Stream(priority=None)", "TypeError",
     "priority must be an int, got None of type NoneType"),
    ("priority-list", "torch.spyre.Stream(priority=[-1])", "TypeError",
     "priority must be an int, got [-1] of type list"),
    # ---- streams of another device type, or not streams
    ("set-stream-cpu", "torch.spyre.set_stream(cpu_stream)", "ValueError",
     "expected a spyre stream, got a stream of device cpu"),
    ("stream-context-cpu", "torch.spyre.stream(cpu_stream)", "ValueError",
     "got a stream of device cpu"),
    ("set-stream-int", "torch.spyre.set_stream(3)", "TypeError",
     "expected a torch.Stream, got 3 of type int"),
    ("stream-get-error-cpu", "torch.spyre.stream_get_error(cpu_stream)", "ValueError",
     "got a stream of device cpu"),
    ("stream-get-error-str", "torch.spyre.stream_get_error('s')", "TypeError",
     "expected a torch.Stream, got 's' of type str"),
    ("error-string-str", "torch.spyre.stream_get_error_string('Shutdown')", "TypeError",
     "got 'Shutdown' of type str"),
    ("inject-fault-cpu", "inject_fault(cpu_stream, 'boom')", "ValueError",
     "got a stream of device cpu"),
    ("inject-fault-message-int", "inject_fault(s, 42)", "TypeError",
     "inject_fault expects a str message, got 42 of type int"),
    ("gate-block-cpu", "Gate().block(cpu_stream)", "ValueError", "got a stream of device cpu"),
    # ---- unknown stream ids
    ("ghost-query", "ghost.query()", "RuntimeError",
     "SpyreStream: no flex handle for stream id 999 on spyre:0"),
    ("ghost-negative-id", "ghost_negative.synchronize()", "RuntimeError",
     "no flex handle for stream id -5 on spyre:0"),
    ("ghost-set-stream", "torch.accelerator.set_stream(ghost)", "RuntimeError",
     "no flex handle for stream id 999"),
    ("ghost-with", "exec('with ghost: pass')", "RuntimeError", "no flex handle for stream id 999"),
    ("ghost-get-error", "torch.spyre.stream_get_error(ghost)", "RuntimeError",
     "no flex handle for stream id 999"),
    ("ghost-gate", "Gate().block(ghost)", "RuntimeError", "no flex handle for stream id 999"),
    ("ghost-inject-fault", "inject_fault(ghost, 'boom')", "RuntimeError",
     "no flex handle for stream id 999"),
    ("ghost-wait-stream", "s.wait_stream(ghost)", "RuntimeError",
     "no flex handle for stream id 999"),
    ("ghost-other-device", "ghost_other_device.query()", "RuntimeError",
     "but spyre:3 was requested"),
    # ---- event misuse
    ("event-interprocess", "torch.spyre.Event(interprocess=True)", "NotImplementedError",
     "torch.spyre.Event(interprocess=True) is not supported"),
    ("event-elapsed-no-timing", "elapsed(timing=False, record_end=True)", "ValueError",
     "Both events must be created with argument 'enable_timing=True'"),
    ("event-elapsed-unrecorded", "elapsed(timing=True, record_end=False)", "ValueError",
     "Both events must be recorded before calculating elapsed time"),
    ("event-elapsed-incomplete", "elapsed_incomplete()", "RuntimeError",
     "Both events must be completed before calculating elapsed time"),
    ("event-record-cpu-stream", "torch.Event(device='spyre').record(cpu_stream)", "RuntimeError",
     "does not match recording stream's device type CPU"),
    ("event-record-ghost", "torch.Event(device='spyre').record(ghost)", "RuntimeError",
     "no flex handle for stream id 999"),
    ("event-wait-ghost", "recorded_event().wait(ghost)", "RuntimeError",
     "no flex handle for stream id 999"),
    ("event-record-other-device", "torch.Event(device='spyre').record(ghost_other_device)",
     "RuntimeError", "but spyre:3 was requested"),
    # ---- _sleep
    ("sleep-negative", "torch.spyre._sleep(-1)", "ValueError",
     "non-negative number of milliseconds, at most 9.2e+12, got -1"),
    ("sleep-nan", "torch.spyre._sleep(float('nan'))", "ValueError", "got nan"),
    ("sleep-inf", "torch.spyre._sleep(float('-inf'))", "ValueError", "got -inf"),
    ("sleep-huge-float", "torch.spyre._sleep(1e300)", "ValueError", "at most 9.2e+12, got 1e+300"),
    ("sleep-huge-int", "torch.spyre._sleep(10**400)", "ValueError", "got 1000000000000"),
    ("sleep-str", "torch.spyre._sleep('10')", "TypeError",
     "_sleep expects a number of milliseconds, got '10' of type str"),
    ("sleep-none", "torch.spyre._sleep(None)", "TypeError", "got None of type NoneType"),
    ("sleep-bool", "torch.spyre._sleep(True)", "TypeError", "got True of type bool"),
    ("sleep-complex", "torch.spyre._sleep(1j)", "TypeError", "got 1j of type complex"),
]

# The child: builds the fixtures rows refer to, runs every row under a
# watchdog (a hang dumps the stacks and exits 3), prints the results as JSON.
API_CHILD = """
import faulthandler, json, sys
import torch
from torch_spyre.testing import Gate, inject_fault

ROWS = json.loads({rows!r})
T = torch.spyre.Stream().device_type
s = torch.spyre.Stream()
cpu_stream = torch.Stream(device="cpu")
ghost = torch.Stream(stream_id=999, device_index=0, device_type=T)
ghost_negative = torch.Stream(stream_id=-5, device_index=0, device_type=T)
ghost_other_device = torch.Stream(stream_id=1, device_index=3, device_type=T)

def recorded_event():
    e = torch.Event(device="spyre")
    e.record()
    return e

def elapsed(timing, record_end):
    start = torch.Event(device="spyre", enable_timing=timing)
    end = torch.Event(device="spyre", enable_timing=timing)
    start.record()
    if record_end:
        end.record()
        end.synchronize()
    return start.elapsed_time(end)

def elapsed_incomplete():
    with Gate() as gate:
        gate.block()
        start = torch.Event(device="spyre", enable_timing=True)
        end = torch.Event(device="spyre", enable_timing=True)
        start.record()
        end.record()
        return start.elapsed_time(end)

results = {{}}
for row_id, code in ROWS:
    faulthandler.dump_traceback_later(30, exit=True)
    try:
        exec(code)
        results[row_id] = ["no exception", ""]
    except BaseException as e:  # noqa: B902 - the type is what is checked
        results[row_id] = [type(e).__name__, str(e)]
    faulthandler.cancel_dump_traceback_later()
# Afterwards the process still works.
torch.spyre.synchronize()
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def api_results():
    rows = [[row[0], row[1]] for row in API_ROWS]
    proc = run_python(API_CHILD.format(rows=json.dumps(rows)), timeout=300)
    assert proc.stderr == ""
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_table_is_big_enough():
    assert len(API_ROWS) + len(ENV_ROWS) >= 30
    assert len({row[0] for row in API_ROWS + ENV_ROWS}) == len(API_ROWS) + len(ENV_ROWS)


@pytest.mark.timeout(400)  # the first runs the fixture, whose deadline is 300 s
@pytest.mark.parametrize("row_id,code,exc,text", API_ROWS, ids=[r[0] for r in API_ROWS])
def test_bad_api_input(api_results, row_id, code, exc, text):
    got_type, got_message = api_results[row_id]
    assert (got_type, text in got_message) == (exc, True), (
        f"{code}: got {got_type}: {got_message!r}, expected {exc} containing {text!r}"
    )


# Environment variables with garbage. The child calls `code` twice (a failed
# start must fail the same way again, not hang or half-start) and must exit 0
# without output on stderr.
ENV_ROWS = [
    ("env-local-rank-word", {"LOCAL_RANK": "zero"}, "torch.spyre.current_device()",
     "RuntimeError", "LOCAL_RANK='zero' is not a valid device index"),
    ("env-local-rank-negative", {"LOCAL_RANK": "-1"}, "torch.spyre.init()",
     "RuntimeError", "LOCAL_RANK='-1' is not a valid device index"),
    ("env-local-rank-huge", {"LOCAL_RANK": "999"}, "torch.empty(1, device='spyre')",
     "RuntimeError", "LOCAL_RANK='999' is not a valid device index"),
    ("env-spyre-devices", {"SPYRE_DEVICES": "a,b"}, "torch.spyre.device_count()",
     "RuntimeError", "SPYRE_DEVICES='a,b' has a non-integer entry 'a'"),
    ("env-aiu-world-size", {"AIU_WORLD_SIZE": "-3"}, "torch.spyre.device_count()",
     "RuntimeError", "AIU_WORLD_SIZE='-3'"),
    # more devices than int8 indices: an error naming both, as CUDA's "Too many CUDA devices"
    ("env-too-many-devices", {"AIU_WORLD_SIZE": "200", "FLEX_STUB_CARDS": "200"},
     "torch.spyre.device_count()", "RuntimeError",
     "200 Spyre devices are visible, but at most 127 are supported"),
    ("env-too-many-devices-tensor", {"AIU_WORLD_SIZE": "200", "FLEX_STUB_CARDS": "200"},
     "torch.ones(1, device='spyre')", "RuntimeError",
     "200 Spyre devices are visible, but at most 127 are supported"),
    ("env-too-many-devices-accelerator", {"AIU_WORLD_SIZE": "128", "FLEX_STUB_CARDS": "128"},
     "torch.accelerator.device_count()", "RuntimeError",
     "128 Spyre devices are visible, but at most 127 are supported"),
    ("env-local-world-size", {"LOCAL_WORLD_SIZE": "two"}, "torch.spyre.init()",
     "RuntimeError", "LOCAL_WORLD_SIZE='two' is not an integer"),
    ("env-cards", {"FLEX_STUB_CARDS": "many"}, "torch.spyre.Stream()",
     "RuntimeError", "FLEX_STUB_CARDS='many' is not an integer"),
    ("env-engines", {"FLEX_STUB_ENGINES": "0"}, "torch.spyre.init()",
     "RuntimeError", "FLEX_STUB_ENGINES='0' is out of range"),
    ("env-memory", {"FLEX_STUB_MEMORY_BYTES": "1GB"}, "torch.ones(1, device='spyre')",
     "RuntimeError", "FLEX_STUB_MEMORY_BYTES='1GB' is not an integer"),
    ("env-dma", {"FLEX_STUB_DMA_GBPS": "nan"}, "torch.spyre.init()",
     "RuntimeError", "FLEX_STUB_DMA_GBPS='nan'"),
    ("env-fault-after", {"FLEX_STUB_FAULT_AFTER": "soon"}, "torch.spyre.synchronize()",
     "RuntimeError", "FLEX_STUB_FAULT_AFTER='soon' is not an integer"),
]

ENV_CHILD = """
import json, torch
out = []
for _ in range(2):
    try:
        {code}
        out.append(["no exception", ""])
    except BaseException as e:  # noqa: B902
        out.append([type(e).__name__, str(e)])
out.append(torch.spyre.is_initialized())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def env_results():
    def one(row):
        proc = run_python(ENV_CHILD.format(code=row[2]), env=row[1], timeout=120, check=False)
        return row[0], proc

    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, ENV_ROWS))


@pytest.mark.parametrize("row_id,env,code,exc,text", ENV_ROWS, ids=[r[0] for r in ENV_ROWS])
def test_bad_environment(env_results, row_id, env, code, exc, text):
    proc = env_results[row_id]
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    first, second, started = json.loads(proc.stdout)
    assert first[0] == exc and text in first[1], (env, first)
    assert second == first  # the same error on retry
    assert started is False


def test_device_count_limit():
    # 127 devices (indices 0-126) work; with more, device_count() raises and
    # availability is False (the C++ noexcept counts say 0).
    proc = run_python(
        """
        import torch
        assert torch.spyre.device_count() == 127
        assert torch.accelerator.device_count() == 127
        torch.spyre.set_device(126)
        assert torch.ones(2, device="spyre").device == torch.device("spyre:126")
        print("ok")
        """,
        env={"AIU_WORLD_SIZE": "127", "FLEX_STUB_CARDS": "127"},
    )
    assert proc.stdout == "ok\n"
    proc = run_python(
        """
        import torch
        assert not torch.spyre.is_available()
        assert not torch.accelerator.is_available()
        print("ok")
        """,
        env={"AIU_WORLD_SIZE": "200", "FLEX_STUB_CARDS": "200"},
    )
    assert (proc.stdout, proc.stderr) == ("ok\n", "")


def test_trace_to_an_unwritable_path_is_reported_at_exit():
    # Nowhere to raise at exit: the runtime prints the path and the reason.
    proc = run_python(
        "import torch; torch.spyre._sleep(1); torch.spyre.synchronize()",
        env={"FLEX_STUB_TRACE": "/nonexistent/dir/trace.json"},
    )
    assert proc.stderr == (
        "flex: cannot write the trace to '/nonexistent/dir/trace.json': No such file or directory\n"
    )
