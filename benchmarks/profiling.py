"""Profiler rows (issue 19): launching ops while torch.profiler records spyre
activities, against the same launches without a profile / with a CPU-only
profile, in the same process (A B A B, medians). Only the launch loop and its
synchronize are timed; entering and leaving (post-processing) the profile are not."""

import time

import torch
from torch.profiler import ProfilerActivity, profile

from measure import Row, at_most, median

SPYRE_ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def add_loop(a, b, n):
    for _ in range(n):
        a + b
    torch.spyre.synchronize()


def timed(activities, a, b, n):
    """ns per launch of `a + b`, inside a profile of `activities` (None: no profile)."""
    if activities is None:
        start = time.perf_counter_ns()
        add_loop(a, b, n)
        return (time.perf_counter_ns() - start) / n
    with profile(activities=activities):
        start = time.perf_counter_ns()
        add_loop(a, b, n)
        elapsed = time.perf_counter_ns() - start
    return elapsed / n


def rows(quick, repeats, selected):
    result = []
    cases = (
        ("profiler.launch_add_1k", None, "no profile", at_most(2)),
        ("profiler.launch_vs_cpu_profile", [ProfilerActivity.CPU], "CPU-only profile",
         at_most(1.5)),
    )
    a = torch.randn(1024, device="spyre")
    b = torch.randn(1024, device="spyre")
    n = 100 if quick else 1000
    for name, ref_activities, ref_name, target in cases:
        if not selected(name):
            continue
        timed(SPYRE_ACTIVITIES, a, b, n // 10)  # warm: first calls, Kineto's start-up
        timed(ref_activities, a, b, n // 10)
        ours, ref = [], []
        for _ in range(repeats):
            ours.append(timed(SPYRE_ACTIVITIES, a, b, n))
            ref.append(timed(ref_activities, a, b, n))
        result.append(Row(name, median(ours), median(ref), "ns", ref_name, target))
    return result
