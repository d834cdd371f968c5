"""Synchronous-path rows: ops whose output shape depends on the data (nonzero,
masked_select, unique, boolean indexing) run at the call, their arguments
copied to the host and their results back in stream order. Each row is the op
on 1 K spyre elements against the same op on CPU, in the same process (A B A B,
medians); docs/performance.md compares the ratios with those of the build before
the host lost access to device memory."""

import torch

from measure import REPORT, Row, interleaved

N = 1 << 10

# (row, the op over `x`, `mask` and `ints`, what the reference is)
OPS = (
    ("sync.nonzero_1k", "torch.nonzero({x})", "cpu nonzero"),
    ("sync.masked_select_1k", "torch.masked_select({x}, {mask})", "cpu masked_select"),
    ("sync.unique_1k", "torch.unique({ints})", "cpu unique"),
    ("sync.bool_index_1k", "{x}[{mask}]", "cpu x[mask]"),
)


def rows(quick, repeats, selected):
    result = []
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, generator=gen)
    cpu = {"x": x, "mask": x > 0,
           "ints": torch.randint(0, 64, (N,), generator=gen)}
    namespace = {"torch": torch, **cpu, **{"d" + k: v.to("spyre") for k, v in cpu.items()}}
    torch.spyre.synchronize()
    loops = 20 if quick else 200
    for name, stmt, ref_name in OPS:
        if not selected(name):
            continue
        ours, ref = interleaved(stmt.format(x="dx", mask="dmask", ints="dints"),
                                stmt.format(x="x", mask="mask", ints="ints"), namespace, loops,
                                repeats)
        result.append(Row(name, ours, ref, "ns", ref_name, REPORT))
    torch.spyre.synchronize()
    return result
