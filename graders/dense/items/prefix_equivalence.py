"""prefix-equivalence: the newest-token output equals full causal attention at every prefix.

The question's core invariant. Each case decodes a whole sequence through the cache
(graders.dense.decode_loop) and compares every step, not only the last: a mistake in how the prefix is
kept shows at some prefix even when the final step happens to agree. When the outputs match a
known mistake (no scale, 1/head_dim, only the newest position, softmax over another axis, SDPA's
is_causal=True with one query, which sees only the first key), the message names it. Still MHA
with every row at the same length (ragged rows and GQA are other items' concerns).

Public: one token at a time from an empty cache, a 5-token prompt then one token at a time, and
a preallocated KVCache(capacity=32).

Hidden, seeded, each compared after every append:
- random shapes, a prompt then chunks of 1 to 6 positions into the non-empty cache, every other
  append non-contiguous: a mistake in where a chunk lands, or in reading a transposed input,
  shows at the next prefix;
- `KVCache(capacity=N)` with N not a power of two and chunks that cross it: the copy made when
  storage grows must keep every position;
- a long cache, ~2000 positions, most of them in three big appends: storage or masks of some
  fixed size, or storage that cannot grow by more than it holds in one append, show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from graders.shared import cases, hidden_cases

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import SDPA_IS_CAUSAL, TOLERANCE, require_close
from graders.shared.plans import Plan

ITEM = "prefix-equivalence"

TOL = TOLERANCE[torch.float32]
B, H, D = 2, 4, 16  # the public cases' shape
PUBLIC = [  # name, capacity, prompt length, total length
    ("one token at a time from an empty cache", None, 1, 12),
    ("a 5-token prompt, then one token at a time", None, 5, 12),
    ("preallocated KVCache(capacity=32), one token at a time", 32, 1, 9),
]
HIDDEN_SEEDS = [300 + i for i in range(2)]
CAPACITY_SEED = 310
LONG_SEED = 320
LONG_APPENDS = (1, 2, 600, 1, 700, 1, 691, 1, 1, 1, 1, 1)  # 2001 positions


@dataclass(frozen=True)
class Case:
    """A sequence ([B, H, T, D] q, k, v) decoded in chunks of `appends` positions into
    KVCache(capacity), every other chunk sent non-contiguous when asked."""

    name: str
    seq: dict[str, torch.Tensor]
    appends: tuple[int, ...]
    capacity: int | None = None
    noncontiguous: bool = False


def grade(candidate: Candidate) -> str:
    for case in _public_cases():
        _check(candidate, case)
    return f"{len(PUBLIC)} cases, every prefix within {TOL} of full causal attention"


def grade_hidden(candidate: Candidate) -> str:
    for case in _hidden_cases():
        with hidden_cases.labelled(case.name):
            _check(candidate, case)
    return (
        f"{len(HIDDEN_SEEDS) + 2} seeded cases (chunked, non-contiguous, preallocated, "
        f"{sum(LONG_APPENDS)} positions): every prefix within {TOL} of full causal "
        "attention"
    )


def _public_cases() -> list[Case]:
    """A prompt, then one token at a time."""
    return [
        Case(
            name,
            cases.sequence(cases.generator(seed), B, H, H, total, D),
            (prompt,) + (1,) * (total - prompt),
            capacity,
        )
        for seed, (name, capacity, prompt, total) in enumerate(PUBLIC)
    ]


def _hidden_cases() -> list[Case]:
    """Random shapes and chunks; a capacity crossed by chunks; a long cache."""
    found = []
    for seed in hidden_cases.seeds(HIDDEN_SEEDS):
        g = cases.generator(seed)
        b, h, d = cases.randint(g, 1, 3), cases.randint(g, 1, 4), cases.choice(g, (8, 16, 32))
        prompt = cases.randint(g, 1, 8)
        appends = (prompt, *cases.chunks(g, cases.randint(g, 20, 40), 6))
        found.append(
            Case(
                hidden_cases.name(
                    seed,
                    f"{hidden_cases.shape(b, h, d)}, a prompt then "
                    "chunks, every other one non-contiguous",
                ),
                cases.sequence(g, b, h, h, sum(appends), d),
                appends,
                noncontiguous=True,
            )
        )
    g = cases.generator(hidden_cases.seed(CAPACITY_SEED))
    capacity = cases.choice(g, (11, 13, 19, 23))
    appends = tuple(cases.chunks(g, 3 * capacity, 7))
    found.append(
        Case(
            hidden_cases.name(
                hidden_cases.seed(CAPACITY_SEED),
                f"KVCache(capacity={capacity}), chunks that cross the capacity",
            ),
            cases.sequence(g, 2, 2, 2, sum(appends), 16),
            appends,
            capacity,
            noncontiguous=True,
        )
    )
    g = cases.generator(hidden_cases.seed(LONG_SEED))
    found.append(
        Case(
            hidden_cases.name(
                hidden_cases.seed(LONG_SEED),
                f"a long cache: {sum(LONG_APPENDS)} positions, "
                f"appends of up to {max(LONG_APPENDS)}",
            ),
            cases.sequence(g, 1, 2, 2, sum(LONG_APPENDS), 8),
            LONG_APPENDS,
            noncontiguous=True,
        )
    )
    return found


def _check(candidate: Candidate, case: Case) -> None:
    """Decode the case; Fail unless every step's output is within TOL of full attention."""
    plan = Plan()
    plan.new("c", capacity=case.capacity)
    steps = decode_loop.append_and_attend(
        plan, case.seq, case.appends, noncontiguous=case.noncontiguous
    )
    results = candidate.run(plan)
    b, h, _, d = case.seq["q"].shape
    got = decode_loop.outputs(
        results, steps, (b, h, 1, d), lambda n, _: f"attend's output at step {n}"
    )
    require_close(
        got,
        decode_loop.expected(case.seq, steps),
        TOL,
        case=case.name,
        likely=_likely_mistakes(case.seq, steps),
        **decode_loop.numbering(case.appends),
    )


def _likely_mistakes(seq: dict, steps: list[decode_loop.Step]) -> dict[str, list[torch.Tensor]]:
    """What known mistakes would output at each step, to name the one the candidate made."""
    q, k, v = seq["q"].double(), seq["k"], seq["v"].double()
    root = math.sqrt(q.shape[-1])

    def scaled(factor: float) -> list[torch.Tensor]:  # the scores times `factor`
        return decode_loop.expected({"q": q * factor, "k": k, "v": v}, steps)

    return {
        "the scores' scale (the outputs match larger scores)": scaled(root),
        "the scores' scale (the outputs match smaller scores)": scaled(1 / root),
        "which positions attention reads (the output is the newest position's value alone)": [
            v[:, :, s.end - 1 : s.end] for s in steps
        ],
        "the softmax's axis (the output weighs every cached position by 1)": [
            v[:, :, : s.end].sum(dim=2, keepdim=True) for s in steps
        ],
        SDPA_IS_CAUSAL: [v[:, :, :1] for _ in steps],
    }
