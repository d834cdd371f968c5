"""Issue 13: the layers are visible and _C is product code only."""

import glob
import os
import re
import subprocess
import textwrap

import pytest
import torch

import torch_spyre._testing
import torch_spyre._C as C

from _helpers import WAIT_UNTIL
from conftest import run_python

from _helpers import ROOT


def test_runtime_layer_includes_no_aten_or_torch_header():
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "csrc", "runtime", "*")):
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if re.match(r"\s*#\s*include\s*[<\"](ATen|torch|pybind11|Python)", line):
                    offenders.append(f"{os.path.basename(path)}:{number}: {line.strip()}")
    assert offenders == []


def test_csrc_is_one_folder_per_layer():
    entries = sorted(os.listdir(os.path.join(ROOT, "csrc")))
    assert entries == ["aten", "device", "graphs", "launch", "profiler", "python", "runtime",
                       "testing"]


# The floors of _C, lowest first (setup.py builds them in this order): a file
# includes headers of its own floor or of floors below it, never above.
FLOORS = ("runtime", "device", "launch", "aten", "graphs", "profiler", "python")


def _includes_up_a_floor(root=ROOT):
    offenders = []
    for floor, layer in enumerate(FLOORS):
        for path in sorted(glob.glob(os.path.join(root, "csrc", layer, "*"))):
            with open(path) as f:
                for number, line in enumerate(f, 1):
                    m = re.match(r'\s*#\s*include\s*"([a-z_]+)/', line)
                    if m and m.group(1) in FLOORS and FLOORS.index(m.group(1)) > floor:
                        offenders.append(f"{layer}/{os.path.basename(path)}:{number}: "
                                         f"{line.strip()}")
    return offenders


def test_no_include_runs_up_a_floor():
    assert _includes_up_a_floor() == []


def test_the_launch_path_is_a_floor_between_device_and_aten():
    # What the launch layer holds (the contract in launch/launch.h) and what
    # stays with the ops: kernels include the launch path, never the reverse.
    launch = set(os.listdir(os.path.join(ROOT, "csrc", "launch")))
    assert {"launch.h", "launch.cpp", "plan.h", "queued_op.h", "sync_path.h", "fallback.cpp",
            "cpu_kernel_scope.h", "verified_signatures.h", "thread_mode.h"} <= launch
    aten = set(os.listdir(os.path.join(ROOT, "csrc", "aten")))
    assert {"kernels.cpp", "rnn.cpp", "attention.cpp", "autocast.cpp", "quantized.cpp",
            "compiled_kernel.cpp"} <= aten
    assert not aten & {"launch.h", "plan.h", "queued_op.h", "work.h", "sync_path.h"}
    kernels = open(os.path.join(ROOT, "csrc", "aten", "kernels.cpp")).read()
    assert '#include "launch/launch.h"' in kernels


def test_the_floor_check_sees_an_include_up_a_floor(tmp_path):
    # The check itself: a runtime file that includes a launch header is named.
    fake = tmp_path / "csrc"
    for layer in FLOORS:
        (fake / layer).mkdir(parents=True)
    (fake / "runtime" / "x.cpp").write_text('#include "device/allocator.h"\n'
                                           '#include "runtime/stream.h"\n')
    (fake / "aten" / "y.cpp").write_text('#include "launch/launch.h"\n')
    assert _includes_up_a_floor(str(tmp_path)) == ['runtime/x.cpp:1: #include "device/allocator.h"']


def test_native_module_has_no_test_or_benchmark_machinery():
    for name in ("_Gate", "_inject_fault", "_trace_start", "_trace_stop", "_bench", "_bench_names"):
        assert not hasattr(C, name), name
    # No undefined reference to flex::test: _C links against a card's runtime too.
    undefined = subprocess.run(["nm", "-D", "--undefined-only", C.__file__],
                               capture_output=True, text=True, check=True).stdout
    assert "_ZN4flex4test" not in undefined
    assert "_ZN4flex4test" in subprocess.run(
        ["nm", "-D", "--undefined-only", torch_spyre._testing.__file__],
        capture_output=True, text=True, check=True).stdout


def test_internal_and_removed_functions_are_not_exported():
    # newBlock is the caching allocator's own (internal linkage); getDefaultStreamRuntimeHandle
    # is gone (nothing called it).
    defined = subprocess.run(["nm", "-D", "--defined-only", "-C", C.__file__],
                             capture_output=True, text=True, check=True).stdout
    assert "spyre::newBlock" not in defined
    assert "getDefaultStreamRuntimeHandle" not in defined
    assert "spyre::getDefaultStream(signed char)" in defined  # the listing names spyre's own


def test_constants_are_exported_once_from_cpp():
    assert (C._default_stream_id, C._first_low_priority_stream_id,
            C._first_high_priority_stream_id, C._num_pool_stream_ids) == (0, 1, 33, 65)
    assert (C._low_priority, C._high_priority, C._max_devices) == (0, -1, 127)
    assert C._max_sleep_ms == 9.2e12
    with pytest.raises(ValueError, match=r"at most 9.2e\+12, got 10000000000000.0$"):
        torch.spyre._sleep(1e13)


@pytest.mark.parametrize("call", [
    lambda: C._set_current_stream(0, 256),
    lambda: C._stream_get_error(0, 256),
    lambda: C._current_stream(300),
    lambda: C._get_default_generator(256),
])
def test_device_ints_never_narrow_unchecked(call):
    with pytest.raises(RuntimeError, match=r"Invalid device index (256|300): out of range for 8 "
                                           r"visible Spyre device\(s\)"):
        call()


def test_is_initialized_is_false_after_free_runtime():
    proc = run_python(
        """
        import torch
        torch.ones(1, device="spyre")
        before = torch.spyre.is_initialized()
        torch.spyre._C.free_runtime()
        print(before, torch.spyre.is_initialized(), int(torch.spyre.get_device_state()))
        """
    )
    assert proc.stdout.split() == ["True", "False", "1"]


def test_empty_cache_frees_blocks_whose_stream_failed():
    proc = run_python(
        WAIT_UNTIL + textwrap.dedent("""
        import torch
        from torch_spyre import testing
        side = torch.spyre.Stream()
        x = torch.ones(1024, device="spyre")
        with testing.Gate() as gate:
            gate.block(side)
            wait_until(lambda: gate.blocked_streams >= 1, what="side to block at the gate")
            x.record_stream(side)
            testing.inject_fault(side, "boom")
            with side:
                torch.spyre._sleep(0)
            del x                    # an event is recorded on the gated, doomed stream
        try:
            side.synchronize()
        except RuntimeError as e:
            print("raised", "boom" in str(e))
        torch.accelerator.empty_cache()
        print(torch.accelerator.memory_allocated(), torch.accelerator.memory_reserved())
        """)
    )
    assert proc.stdout.split() == ["raised", "True", "0", "0"]
