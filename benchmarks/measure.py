"""Rows, targets and the interleaved timing every benchmark uses.

Every figure is a ratio against a reference measured in the same process,
A B A B ..., taking the median of each side: the machine's noise hits both.
"""

import gc
import statistics
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Target:
    """What a row must show: ratio <= bound, ratio >= bound, ours < bound
    (absolute), or nothing (report only)."""

    kind: str  # "max_ratio", "min_ratio", "max_ours", "report"
    bound: float = 0.0
    text: str = ""

    def holds(self, row) -> bool:
        if self.kind == "max_ratio":
            return row.ratio <= self.bound
        if self.kind == "min_ratio":
            return row.ratio >= self.bound
        if self.kind == "max_ours":
            return row.ours < self.bound
        return True

    def describe(self) -> str:
        if self.text:
            return self.text
        return {"max_ratio": f"<= {self.bound:g}x", "min_ratio": f">= {self.bound:g}x"}.get(
            self.kind, "report"
        )


def at_most(bound):
    return Target("max_ratio", bound)


def at_least(bound):
    return Target("min_ratio", bound)


def below(bound, text):
    return Target("max_ours", bound, text)


REPORT = Target("report")


@dataclass
class Row:
    name: str
    ours: float
    ref: float
    unit: str  # of ours and ref
    ref_name: str  # which reference: "R1", "cpu Stream", "ideal", ...
    target: Target
    # Structural checks that must hold whatever the timing (e.g. "enqueued_nothing").
    checks: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.ref if self.ref else float("inf")

    @property
    def result(self) -> str:
        if not all(self.checks.values()):
            return "MISS"
        if self.target.kind == "report":
            return "report"
        return "PASS" if self.target.holds(self) else "MISS"

    def as_dict(self):
        return {
            "name": self.name,
            "ours": self.ours,
            "ref": self.ref,
            "unit": self.unit,
            "ref_name": self.ref_name,
            "ratio": self.ratio,
            "target": self.target.describe(),
            "result": self.result,
            "checks": self.checks,
            "extras": self.extras,
        }


def median(values):
    return statistics.median(values)


def ns_per_call(stmt, namespace, loops):
    """ns per execution of `stmt` (a statement, compiled inline like timeit).

    Unlike timeit, the garbage collector stays on: statements that allocate
    pay for collection as they do in real code.
    """
    code = compile(f"def _loop(_n):\n    for _ in range(_n):\n        {stmt}\n", "<bench>", "exec")
    scope = dict(namespace)
    exec(code, scope)
    loop = scope["_loop"]
    gc.collect()
    start = time.perf_counter_ns()
    loop(loops)
    return (time.perf_counter_ns() - start) / loops


def interleaved(ours_stmt, ref_stmt, namespace, loops, repeats):
    """(median ns of ours, median ns of ref), measured alternately `repeats` times."""
    ours, ref = [], []
    ns_per_call(ours_stmt, namespace, max(1, loops // 10))  # warm-up
    ns_per_call(ref_stmt, namespace, max(1, loops // 10))
    for _ in range(repeats):
        ours.append(ns_per_call(ours_stmt, namespace, loops))
        ref.append(ns_per_call(ref_stmt, namespace, loops))
    return median(ours), median(ref)
