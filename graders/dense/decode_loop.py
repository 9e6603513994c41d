"""Decode a sequence through a cache in chunks, and the float64 answers to compare it with.

The question's invariant, as a loop: append a chunk of positions, attend with the newest
query, again until the sequence is in; each output must equal the newest row of a full causal
forward over the positions appended so far. One token at a time is the chunk size 1; a prompt
is a first chunk. The judge's answer for each step is `newest` (float64, from the same inputs).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from graders.shared import reference
from graders.shared.compare import require_shape
from graders.shared.plans import Plan, Results, tensor


class Step(NamedTuple):
    """One attend of the loop: its operation's index in the plan, and the positions cached."""

    index: int
    end: int


def append_and_attend(
    plan: Plan, seq: dict[str, torch.Tensor], appends, cache: str = "c", noncontiguous: bool = False
) -> list[Step]:
    """Append `seq`'s keys and values ([B, Hkv, T, D]) to `cache` in chunks of `appends`
    positions, attending with the newest query after each. With `noncontiguous`, every other
    chunk is sent as a non-contiguous tensor (the same values)."""
    steps, total = [], 0
    for i, t in enumerate(appends):
        k, v = seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t]
        if noncontiguous and i % 2:
            k, v = {"noncontiguous": k}, {"noncontiguous": v}
        plan.append(cache, k, v)
        total += t
        steps.append(Step(plan.attend(cache, seq["q"][:, :, total - 1 : total]), total))
    return steps


def outputs(
    results: Results, steps: list[Step], shape: tuple[int, ...], what: Callable[[int, Step], str]
) -> list[torch.Tensor]:
    """attend's output at each step: first each must be a plain tensor, then each of `shape`
    (else Fail, saying `what(step number, step)` returned it)."""
    got = [tensor(results[step.index], what(n, step)) for n, step in enumerate(steps)]
    for (n, step), out in zip(enumerate(steps), got):
        require_shape(out, shape, what(n, step))
    return got


def newest(seq: dict[str, torch.Tensor], n: int) -> torch.Tensor:
    """Row n-1 of the full causal forward over the first n positions of `seq`: [B, Hq, 1, D],
    float64.

    With the newest query alone, the causal mask lets it see all n positions, so
    `reference.causal_attention` over the n-position prefix gives that row without building the
    n x n scores of every row (which long caches cannot afford).
    """
    q, k, v = seq["q"][:, :, n - 1 : n], seq["k"][:, :, :n], seq["v"][:, :, :n]
    return reference.causal_attention(q, k, v)


def expected(seq: dict[str, torch.Tensor], steps: list[Step]) -> list[torch.Tensor]:
    """The judge's answer at every step: `newest` over the positions cached by then."""
    return [newest(seq, step.end) for step in steps]


def numbering(appends) -> dict:
    """How `require_close` names a case's steps: by prefix length when every append after the
    first brings one position (a prompt, then one token at a time), else by append number."""
    if all(t == 1 for t in appends[1:]):
        return {"step_name": "prefix length", "first_step": appends[0]}
    return {"step_name": "append", "first_step": 1}
