"""Plans (csrc/launch/plan.cpp): an op's first call with a new shape builds a plan from the op's
meta kernel, unless a plan of another shape serves as a template: a pointwise op or a reduction
whose tensors are all contiguous and of one shape. Results, strides and dtypes equal CPU's either
way; the plan counters (_C._plan_counts) say which calls ran a meta kernel."""

from conftest import run_python


# A loop over new shapes: a pointwise op or a reduction whose tensors are all contiguous and of
# one shape reuses another shape's plan (csrc/launch/plan.cpp, templatePlan); every other call
# runs its meta kernel. Results, strides and dtypes equal CPU's either way.
NEW_SHAPES = """
import json
import torch
from torch_spyre import _C

def calls(x):
    return {
        "add_scalar": x + 1,                        # pointwise: a template after the first shape
        "mul_self": x * x,
        "where": torch.where(x > 0, x, 2.5),
        "to_int": x.to(torch.int32) + 3,
        "gt": x > 0.5,
        "frexp": torch.frexp(x)[1],                 # two outputs
        "sum_dim": x.sum(dim=0),                    # reductions: templates too
        "sum_keepdim": x.sum(dim=-1, keepdim=True),
        "mean": x.mean(),
        "amax": x.amax(dim=[-1]),
        "logsumexp": torch.logsumexp(x, dim=1),
        "prod_dtype": x.prod(dim=0, dtype=torch.float64),
        "int_sum": x.to(torch.int32).sum(dim=1),     # int32 in, int64 out
        "sliced": x[:, :1] * 2,                     # not contiguous: a meta run per shape
        "broadcast": x + x[:1],                     # two shapes: a meta run per shape
        "transposed": x.t() * 3,                    # not contiguous
    }

def counts():
    return _C._plan_counts()

results, made = {}, []
for rows in (5, 1, 7, 64, 0):
    cpu = torch.randn(rows, 3)
    spyre_x = cpu.to("spyre")
    before = counts()
    spyre = calls(spyre_x)
    after = counts()
    made.append([after[k] - before[k] for k in ("meta_runs", "from_template")])
    for name, want in calls(cpu).items():
        got = spyre[name]
        got_cpu = got.cpu()
        same = torch.equal(got_cpu, want) or (  # NaN (the mean of nothing) equals NaN
            want.is_floating_point() and torch.equal(got_cpu.isnan(), want.isnan())
            and torch.equal(got_cpu.nan_to_num(), want.nan_to_num()))
        ok = (got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
              and same)
        results.setdefault(name, []).append(ok)
print(json.dumps({"equal": results, "made": made}))
"""


def test_new_shapes_reuse_pointwise_and_reduction_plans_and_equal_cpu():
    import json

    out = json.loads(run_python(NEW_SHAPES).stdout)
    assert out["equal"] == {name: [True] * 5 for name in (
        "add_scalar", "mul_self", "where", "to_int", "gt", "frexp", "sum_dim", "sum_keepdim",
        "mean", "amax", "logsumexp", "prod_dtype", "int_sum", "sliced", "broadcast",
        "transposed")}
    # Per shape, [meta runs, plans from a template] for the 17 launched calls: the first shape
    # runs every meta kernel; rows 1, 7, 64 take add, mul, both gt, the int add and the six
    # reductions from templates (where and frexp, the strided and broadcast calls run theirs);
    # an empty tensor runs every meta kernel.
    assert out["made"] == [[17, 0], [6, 11], [6, 11], [6, 11], [17, 0]]
