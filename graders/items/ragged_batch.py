"""ragged-batch: rows of different lengths attend only to their own positions.

Three sequences (B=3) with prompts of 5, 2 and 3 positions, sent as ONE append of t=5 with
counts [5, 2, 3] whose padding positions are NaN: a cache that ignores counts stores NaN where
attention sees it. Then single-position steps for every row, steps where one row has counts 0
(a finished sequence: it must not grow, and its output stays attention over its own positions
for the same query), and a padded 2-position append mid-stream. Every step checks lengths, and
every row's output against the float64 reference for that row's own sequence. A cache that
masks by max(lengths) or by capacity rather than each row's length shows on the shorter rows.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, close, first_divergence, require_shape

ITEM = "ragged-batch"

B, H, D, TOTAL = 3, 2, 8, 12
STEPS = [  # (t, counts)
    (5, (5, 2, 3)),  # three prompts in one padded append
    (1, (1, 1, 1)),
    (1, (1, 1, 1)),
    (1, (1, 0, 1)),  # row 1 skips a step
    (1, (0, 1, 1)),
    (2, (2, 0, 1)),
]


def grade(candidate: Candidate) -> str:
    seq = cases.sequence(cases.generator(500), B, H, H, TOTAL, D)
    full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, TOTAL, D]
    rows = range(B)
    plan = Plan()
    plan.new("c")
    ops, expected, lengths = [], [], [0] * B
    for t, counts in STEPS:
        new = {part: cases.padded(torch.stack([seq[part][b, :, lengths[b] : lengths[b] + t]
                                               for b in rows]), list(counts))
               for part in ("k", "v")}  # [B, H, t, D], NaN past counts[b]
        plan.append("c", new["k"], new["v"], cases.counts(*counts))
        previous, lengths = lengths, [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([seq["q"][b, :, n - 1 : n] for b, n in zip(rows, lengths)])
        ops.append((previous, lengths, plan.state("c"), plan.attend("c", query)))
        expected.append(torch.stack([full[b, :, n - 1 : n] for b, n in zip(rows, lengths)]))
    results = candidate.run(plan)

    got = []
    for step, ((t, counts), (previous, lengths, state, attended)) in enumerate(zip(STEPS, ops)):
        where = f"step {step} (t={t}, counts {list(counts)})"
        found = tensor(results[state]["lengths"], f"cache.lengths after {where}")
        if found.dtype != torch.int64 or found.tolist() != lengths:
            ignored = found.tolist() == [n + t for n in previous]
            hint = ": counts ignored? Each row grows by its own counts[b]" if ignored else ""
            raise Fail(f"cache.lengths after {where} is {str(found.dtype).removeprefix('torch.')} "
                       f"{found.tolist()}, expected int64 {lengths}{hint}")
        got.append(tensor(results[attended], f"attend's output after {where}"))
        require_shape(got[-1], (B, H, 1, D), f"attend's output after {where}")

    divergence = first_divergence(got, expected, TOLERANCE[torch.float32])
    if divergence is None:
        return (f"{len(STEPS)} ragged steps (padded prompts, rows with counts 0): lengths and "
                f"every row within {TOLERANCE[torch.float32]} of attention over its own sequence")
    step = divergence.step
    t, counts = STEPS[step]
    lengths = ops[step][1]
    message = (f"step {step} (t={t}, counts {list(counts)}, lengths {lengths}): row "
               f"{divergence.row}, head {divergence.head} is not attention over that row's own "
               f"{lengths[divergence.row]} positions (max abs error {divergence.max_abs:.2e}, "
               f"tolerance {TOLERANCE[torch.float32]})")
    raise Fail(message + _likely(got[step], expected[step], lengths, step))


def _likely(got: torch.Tensor, expected: torch.Tensor, lengths: list[int], step: int) -> str:
    """A likely-mistake label from which rows of the first wrong step are wrong, and how."""
    wrong = [b for b in range(B) if not close(got[b], expected[b], TOLERANCE[torch.float32]).all()]
    if not any(torch.isfinite(got[b]).all() for b in wrong):  # every wrong row is NaN or inf
        return ". Likely mistake: NaN padding (positions past counts[b]) was stored or attended to?"
    if not all(lengths[b] < max(lengths) for b in wrong):
        return ""
    if step == 0:  # the rows already differ in length at the prompts
        return (". Likely mistake: only rows shorter than the longest are wrong: attending past "
                "a row's own length (padding or capacity)?")
    return (". Likely mistake: only rows shorter than the longest go wrong, after the prompts were "
            "right: new positions written at one offset for all rows, not at each row's length?")
