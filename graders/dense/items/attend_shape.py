"""attend-shape: attend returns a plain tensor of shape [B, Hq, 1, D].

Only the shape is judged (L4): the values are prefix-equivalence's business; MHA only (GQA is
gqa's). Each case appends in chunks and attends after every append.

Public: three MHA shapes: the smallest (one row, one head, head_dim 4), a batch of 2 with 4
heads of head_dim 16 after each of several single-position appends, and a 2-row, 2-head batch
after one 3-position append (so the output must not carry one position per cached key).

Hidden, seeded:
- random batch (1 to 6), heads (1 to 6) and head_dim (2 to 64, even), with chunked appends into
  a non-empty cache: code that squeezes or reshapes by a dimension that happened to be 1 or
  equal to another in the public shapes, or returns one output per position of the last append,
  shows;
- a long cache (712 positions, in appends that never more than double it: how storage grows is
  append-time-dim's business): code that builds its mask or scores from a fixed-size buffer (a
  `block_size` of 512, say) cannot answer past it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graders.shared import cases, hidden_cases

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import require_shape
from graders.shared.plans import Plan, tensor

ITEM = "attend-shape"

PUBLIC = [
    # name, B, H, D, positions per append (attend after each)
    ("B=1, 1 head, head_dim 4, one position", 1, 1, 4, (1,)),
    ("B=2, 4 heads, head_dim 16, single-position appends", 2, 4, 16, (1, 1, 1, 1, 1)),
    ("B=2, 2 heads, head_dim 8, one 3-position append", 2, 2, 8, (3,)),
]
HIDDEN_SEEDS = [200 + i for i in range(4)]
LONG_SEED = 210
LONG_APPENDS = (5, 11, 16, 32, 64, 128, 256, 200)


@dataclass(frozen=True)
class Case:
    """A sequence ([B, H, T, D] q, k, v) appended in chunks of `appends` positions."""

    name: str
    seq: dict[str, torch.Tensor]
    appends: tuple[int, ...]


def grade(candidate: Candidate) -> str:
    outputs = _check(candidate, _public_cases())
    return f"{outputs} outputs over {len(PUBLIC)} shapes, each [B, Hq, 1, D]"


def grade_hidden(candidate: Candidate) -> str:
    outputs = 0
    for case in _hidden_cases():
        with hidden_cases.labelled(case.name):
            outputs += _check(candidate, [case])
    return (
        f"{outputs} outputs over {len(HIDDEN_SEEDS) + 1} seeded shapes and lengths, each "
        "[B, Hq, 1, D]"
    )


def _public_cases() -> list[Case]:
    return [
        Case(name, cases.sequence(cases.generator(200 + seed), B, H, H, sum(appends), D), appends)
        for seed, (name, B, H, D, appends) in enumerate(PUBLIC)
    ]


def _hidden_cases() -> list[Case]:
    """Random shapes and chunks; a long cache."""
    found = []
    for seed in hidden_cases.seeds(HIDDEN_SEEDS):
        g = cases.generator(seed)
        B, H = cases.randint(g, 1, 6), cases.randint(g, 1, 6)
        D = cases.choice(g, (2, 6, 12, 24, 64))
        appends = tuple(cases.chunks(g, cases.randint(g, 6, 20), 6))
        found.append(
            Case(
                hidden_cases.name(seed, f"{hidden_cases.shape(B, H, D)}, chunked appends"),
                cases.sequence(g, B, H, H, sum(appends), D),
                appends,
            )
        )
    g = cases.generator(hidden_cases.seed(LONG_SEED))
    found.append(
        Case(
            hidden_cases.name(
                hidden_cases.seed(LONG_SEED), f"a long cache of {sum(LONG_APPENDS)} positions"
            ),
            cases.sequence(g, 2, 3, 3, sum(LONG_APPENDS), 8),
            LONG_APPENDS,
        )
    )
    return found


def _check(candidate: Candidate, batch: list[Case]) -> int:
    """Run every case in one plan, each in a cache of its own; Fail unless every output is a
    tensor of shape [B, Hq, 1, D]. Returns the number of outputs judged."""
    plan = Plan()
    steps = {}
    for i, case in enumerate(batch):
        plan.new(f"c{i}")
        steps[case.name] = decode_loop.append_and_attend(plan, case.seq, case.appends, f"c{i}")
    results = candidate.run(plan)
    for case in batch:
        B, H, _, D = case.seq["q"].shape
        for step in steps[case.name]:
            s = "s" if step.end > 1 else ""
            what = f"attend's output ({case.name}, {step.end} cached position{s})"
            got = tensor(results[step.index], what)
            require_shape(got, (B, H, 1, D), what, _hint(got, (B, H, 1, D), step.end))
    return sum(len(s) for s in steps.values())


def _hint(got, shape: tuple[int, ...], total: int) -> str:
    if got.dim() == 3:
        return ": the query's time dimension (size 1) was dropped"
    if got.dim() == 4 and got.shape[2] == total != 1:
        return ": one output per cached position; attend returns only the newest query's output"
    if got.dim() == 4 and got.shape[-1] == total != shape[-1]:
        return ": the last dimension counts cached positions; multiply the weights by the values"
    return ""
