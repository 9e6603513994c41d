"""attend-shape: attend returns a plain tensor of shape [B, Hq, 1, D].

Three MHA shapes: the smallest (one row, one head, head_dim 4), a batch of 2 with 4 heads of
head_dim 16 after each of several single-position appends, and a 2-row, 2-head batch after one
3-position append (so the output must not carry one position per cached key). Only the shape is
judged (L4): the values are prefix-equivalence's business.
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate, Plan, tensor
from graders.compare import require_shape

ITEM = "attend-shape"

CASES = [
    # name, B, H, D, positions per append (attend after each)
    ("B=1, 1 head, head_dim 4, one position", 1, 1, 4, (1,)),
    ("B=2, 4 heads, head_dim 16, single-position appends", 2, 4, 16, (1, 1, 1, 1, 1)),
    ("B=2, 2 heads, head_dim 8, one 3-position append", 2, 2, 8, (3,)),
]


def grade(candidate: Candidate) -> str:
    plan = Plan()
    outputs = []  # (case name, expected shape, positions cached, op index)
    for seed, (name, B, H, D, appends) in enumerate(CASES):
        seq = cases.sequence(cases.generator(200 + seed), B, H, H, sum(appends), D)
        plan.new(name)
        total = 0
        for t in appends:
            plan.append(name, seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
            total += t
            query = seq["q"][:, :, total - 1 : total]
            outputs.append((name, (B, H, 1, D), total, plan.attend(name, query)))
    results = candidate.run(plan)
    for name, shape, total, index in outputs:
        what = f"attend's output ({name}, {total} cached position{'s' if total > 1 else ''})"
        got = tensor(results[index], what)
        require_shape(got, shape, what, _hint(got, shape, total))
    return f"{len(outputs)} outputs over {len(CASES)} shapes, each [B, Hq, 1, D]"


def _hint(got, shape: tuple[int, ...], total: int) -> str:
    if got.dim() == 3:
        return ": the query's time dimension (size 1) was dropped"
    if got.dim() == 4 and got.shape[2] == total != 1:
        return ": one output per cached position; attend returns only the newest query's output"
    if got.dim() == 4 and got.shape[-1] == total != shape[-1]:
        return ": the last dimension counts cached positions; multiply the weights by the values"
    return ""
