"""Issue 9: the benchmark code runs and reports every row. Structure only:
speed is never asserted in tests (benchmarks/run.py prints PASS/MISS)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from conftest import DEVICE_ENV

from _helpers import ROOT

ROWS = {
    "pool.resolve",
    "pool.current_stream",
    "pool.get_stream_from_pool",
    "pool.mixed_reader_p99",
    "pool.first_touch_p99",
    "stub.round_trip",
    "stub.pipelined_10k",
    "stub.idle_sync",
    "stub.idle_device_sync_65",
    "stub.overlap_2x20ms",
    "stub.overlap_32x20ms",
    "stub.same_stream_2x20ms",
    "stub.card_launch_after_1m",
    "python.torch_stream",
    "python.with_stream",
    "python.spyre_stream",
    "python.launch_sync_round_trip",
    "python.idle_stream_sync",
    "copy.h2d_64mib",
    "copy.d2h_64mib",
    "compute.host_runs_ahead",
    "compute.add_1k",
    "compute.add_1m",
    "compute.matmul_512",
    "compute.mlp_train_step",
    "compute.two_streams",
    "sanitizer.add_1k_on",
    "numerics.add_1k_dl16",
    "numerics.matmul_512_dl16",
    "compile.mlp_forward",
    "compile.transformer_block",
    "compile.transformer_block_on_cpu",
    "compile.first_compile",
    "graphs.replay_100_adds",
    "graphs.transformer_block",
    "sync.nonzero_1k",
    "sync.masked_select_1k",
    "sync.unique_1k",
    "sync.bool_index_1k",
    "profiler.launch_add_1k",
    "profiler.launch_vs_cpu_profile",
    "process.first_result",
    "process.first_pass_new_shapes",
    "timing.card_add_1k",
}
# transformers is an optional test dependency (the README's scripts install it).
if importlib.util.find_spec("transformers") is not None:
    ROWS.add("compute.gpt2_generate")


@pytest.mark.slow
@pytest.mark.timeout(700)  # its own deadline is 600 s
def test_quick_run_reports_every_row_and_idle_syncs_enqueue_nothing(tmp_path):
    results = tmp_path / "results.json"
    env = {k: v for k, v in os.environ.items() if k not in DEVICE_ENV}
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick",
         "--json", str(results)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {row["name"]: row for row in json.loads(results.read_text())["rows"]}
    assert set(rows) == ROWS
    for name, row in rows.items():
        assert row["ours"] > 0 and row["ref"] > 0, row
        assert row["result"] in ("PASS", "MISS", "report"), row
        assert name in proc.stdout, f"{name} missing from the printed table"
    # Synchronizing an idle stream, or a device whose 65 streams are idle, enqueues nothing.
    assert rows["stub.idle_sync"]["checks"] == {"enqueued_nothing": True}
    assert rows["stub.idle_device_sync_65"]["checks"] == {"enqueued_nothing": True}
    # Ids 0-64 and the 4 host-compute streams (65-68).
    assert rows["stub.idle_device_sync_65"]["extras"]["mapped_streams"] == 69


@pytest.mark.slow
def test_every_cpp_benchmark_has_a_row(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "benchmarks"))
    import native

    assert {bench for bench, *_ in native.ROWS.values()} == set(native.bench_names())
