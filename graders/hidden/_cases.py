"""What the hidden graders share: seeded case shapes, replayable case names, the newest-token
reference for long caches, and checking what the candidate's calls left of their inputs.

Every hidden case is generated from its seed alone (`BASE_SEED` plus an offset per item and case):
the shapes, the chunk sizes and the tensors. A failure names the seed and says what kind of case
it was; it never prints an input tensor, so a candidate learns which concern failed, not the case
itself. To replay one, rebuild the case from its seed in the item's file.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from graders import reference
from graders.candidate import (Candidate, CandidateError, CandidateTimeout, Fail, Plan, Results,
                               tensor)
from graders.compare import require_shape

BASE_SEED = 7000


def name(seed: int, what: str) -> str:
    """How a hidden case names itself in messages (grade.py puts "hidden case: " in front)."""
    return f"seed {seed} ({what})"


def shape(B: int, H: int, D: int | None = None, heads: str = "head") -> str:
    """A case's shape in words: "B=2, 1 kv head, head_dim 8"."""
    words = f"B={B}, {H} {heads}{'s' if H != 1 else ''}"
    return words if D is None else f"{words}, head_dim {D}"


def randint(g: torch.Generator, low: int, high: int) -> int:
    """A seeded integer in low..high, both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def choice(g: torch.Generator, options: tuple):
    return options[randint(g, 0, len(options) - 1)]


def chunks(g: torch.Generator, total: int, most: int) -> list[int]:
    """Positions per append, each 1..most, adding up to `total`."""
    sizes = []
    while total > 0:
        sizes.append(min(randint(g, 1, most), total))
        total -= sizes[-1]
    return sizes


def newest(seq: dict[str, torch.Tensor], n: int) -> torch.Tensor:
    """Row n-1 of the full causal forward over the first n positions of `seq`: [B, Hq, 1, D],
    float64.

    With the newest query alone, the causal mask lets it see all n positions, so
    `reference.causal_attention` over the n-position prefix gives that row without building the
    n x n scores of every row (which long caches cannot afford).
    """
    q, k, v = seq["q"][:, :, n - 1 : n], seq["k"][:, :, :n], seq["v"][:, :, :n]
    return reference.causal_attention(q, k, v)


def attend_after_each_chunk(plan: Plan, seq: dict[str, torch.Tensor], appends,
                            noncontiguous: bool = False) -> list[tuple[int, int]]:
    """Append `seq`'s keys and values to cache "c" in chunks of `appends` positions (every other
    chunk sent non-contiguous when `noncontiguous`), attending with the newest query after each.
    Returns (attend's operation index, prefix length) per chunk."""
    steps, total = [], 0
    for i, t in enumerate(appends):
        k, v = seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t]
        if noncontiguous and i % 2:
            k, v = {"noncontiguous": k}, {"noncontiguous": v}
        plan.append("c", k, v)
        total += t
        steps.append((plan.attend("c", seq["q"][:, :, total - 1 : total]), total))
    return steps


def outputs(results: Results, steps: list[tuple[int, int]], shape: tuple[int, ...],
            case: str) -> list[torch.Tensor]:
    """attend's output after each chunk, each a plain tensor of `shape` (else Fail)."""
    got = []
    for index, end in steps:
        what = f"{case}: attend's output at prefix length {end}"
        got.append(tensor(results[index], what))
        require_shape(got[-1], shape, what)
    return got


def run(candidate: Candidate, plan: Plan, case: str) -> Results:
    """`candidate.run(plan)`, with `case` in front of what a crash, hang or unexpected exception
    says."""
    with labelled(case):
        return candidate.run(plan)


@contextmanager
def labelled(case: str):
    """Put `case` in front of a CandidateError or CandidateTimeout raised inside (a grader's own
    Fail messages name their case themselves)."""
    try:
        yield
    except CandidateTimeout as exc:
        raise CandidateTimeout(f"{case}: {exc}") from None
    except CandidateError as exc:
        raise CandidateError(f"{case}: {exc}") from None


def require_unchanged(sent: dict[str, torch.Tensor], after: dict, call: str, case: str) -> None:
    """Fail unless every input in `sent` came back from `call` (`Results.inputs_after`) with the
    same shape, dtype and values (NaN where NaN was sent)."""
    for arg, original in sent.items():
        back = after.get(arg)
        same = (isinstance(back, torch.Tensor) and back.shape == original.shape
                and back.dtype == original.dtype
                and bool(((back == original) | (back.isnan() & original.isnan())).all()))
        if not same:
            raise Fail(f"{case}: {call} modified its `{arg}` argument in place; the caller still "
                       "owns it (an in-place op on the argument, or on a view of it?)")
