"""Issue 30, item 4: profiles show the user's work only.

The first call of an op in a process infers its outputs with the op's meta
kernel and tries the CPU kernel on zeroed scratch memory (csrc/launch/launch.cpp,
buildPlan and verifyPlan). Neither is the user's work: a profile of N calls
must show exactly N of each op the user called and none of the ops those steps
run (aten::zeros / zero_ of the scratch buffers, relu's Python meta kernel's
aten::le, aten::where, prims::*). Each check runs in a fresh process, so the
profiled calls really are the first ones.
"""

import ast

from conftest import run_python

# Ops the first-call steps run that a user of x @ w, relu, +, sigmoid, * never calls.
NOISE = {"aten::zeros", "aten::zero_", "aten::fill_", "aten::le", "aten::where",
         "aten::scalar_tensor", "aten::new_empty"}


def check_counts(counts, calls):
    noise = sorted(k for k in counts if k in NOISE or k.startswith("prims::"))
    assert noise == []
    for name, n in calls.items():
        assert counts.get(name) == n, (name, counts)


def test_kineto_profile_of_first_calls_counts_each_call_once():
    proc = run_python("""
        import torch
        from torch.profiler import ProfilerActivity, profile
        x = torch.arange(6.0, device="spyre").reshape(2, 3)
        w = torch.ones(3, 4, device="spyre")
        torch.spyre.synchronize()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                y = torch.relu(x @ w) + 1
            torch.spyre.synchronize()
        print({e.key: e.count for e in prof.key_averages()})
        print(y.cpu().tolist())
    """)
    out = proc.stdout.splitlines()
    check_counts(ast.literal_eval(out[0]), {"aten::mm": 3, "aten::relu": 3, "aten::add": 3,
                                            "aten::matmul": 3})
    assert out[1] == "[[4.0, 4.0, 4.0, 4.0], [13.0, 13.0, 13.0, 13.0]]"


def test_kineto_device_activities_count_each_call_once():
    # With device activities too: one device kernel per call, none for the scratch runs.
    proc = run_python("""
        import torch
        from torch.profiler import ProfilerActivity, profile
        x = torch.arange(6.0, device="spyre").reshape(2, 3)
        torch.spyre.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            for _ in range(4):
                y = torch.sigmoid(x)
            torch.spyre.synchronize()
        cpu, device = {}, {}
        for e in prof.events():
            side = cpu if e.device_type == torch.autograd.DeviceType.CPU else device
            side[e.name] = side.get(e.name, 0) + 1
        print(cpu)
        print(device.get("aten::sigmoid Cmpt Exec"))
    """)
    out = proc.stdout.splitlines()
    check_counts(ast.literal_eval(out[0]), {"aten::sigmoid": 4})
    assert out[1] == "4"


def test_legacy_profile_of_first_calls_counts_each_call_once():
    proc = run_python("""
        import torch
        from torch.autograd.profiler_legacy import profile
        x = torch.arange(6.0, device="spyre").reshape(2, 3)
        torch.spyre.synchronize()
        with profile() as prof:
            for _ in range(3):
                z = torch.sigmoid(x) * 2
        counts = {}
        for e in prof.function_events:
            counts[e.name] = counts.get(e.name, 0) + 1
        print(counts)
    """)
    check_counts(ast.literal_eval(proc.stdout.splitlines()[0]), {"aten::sigmoid": 3,
                                                                 "aten::mul": 3})
