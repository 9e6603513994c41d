"""A run of chunks on one cache, played into a plan with the judge's float64 answers (L6+).

What the L6+ items share (contract section 8): appends (ragged through counts, or a chunk of t
that every row takes), `attend_chunk` over the chunk just appended, `attend`, `release` and
`truncate`, on a `KVCache()` or a `KVCache(window=W)`. The judge keeps each row's whole
sequence of keys and values itself, position p at index p, and answers every attend with
`reference.attention_at` over it: the query at p sees p - W + 1 .. p (0 .. p without a window).
Each answer comes with what the likely mistakes would output (`Check.likely`), so a failure
names the mistake whose output the candidate's matches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from graders.shared import cases, reference
from graders.shared.compare import TOLERANCE, require_close, require_shape
from graders.shared.plans import STATE_8, Fail, Plan, Results, tensor

# Measured: the reference solution's chunk outputs (windows None, 1, 3, 8, 1000, chunks of 1 to
# 7, ragged rows, truncations) are within 5.5e-7 of the float64 answers, as attend's are
# (graders.shared.compare's table), so the float32 tolerance holds with its 18x margin.
TOL = TOLERANCE[torch.float32]

# The likely mistakes a chunk's output is compared with when it fails.
OWN_FUTURE = (
    "the chunk attends its own future: each query of the chunk sees the positions "
    "appended after it in the same chunk (the causal mask inside the chunk)"
)
TOP_LEFT = (
    "the chunk's causal mask is aligned to the top-left corner (query i sees positions "
    "0..i), not to each row's own end (query i of row b sits at positions[b] - t + i)"
)
WIDER = "the window is one position too wide (the query at p also sees p - W)"
NARROWER = "the window is one position too narrow (the query at p sees only p - W + 2 .. p)"
NO_WINDOW = "the window is not applied: the query sees every position its row still holds"


@dataclass(frozen=True)
class Check:
    """An attend of the run: its operation's index, the judge's answer [B, Hq, t, D] (float64),
    the words that name it, and what each likely mistake would output."""

    index: int
    want: torch.Tensor
    what: str
    likely: dict[str, torch.Tensor] = field(default_factory=dict)


class Run:
    """Operations on one cache named `cache`, each added to `plan` and followed by the judge.

    `hq`, `hkv`, `d`: the heads and head_dim; `window`: W, or None for a cache without one.
    Inputs are drawn from `g`; padding past a row's counts is NaN (a write of it shows)."""

    def __init__(
        self,
        plan: Plan,
        g: torch.Generator,
        batch: int,
        hq: int,
        hkv: int,
        d: int,
        cache: str = "c",
        window: int | None = None,
        capacity: int | None = None,
    ):
        self.plan, self.g, self.cache, self.window = plan, g, cache, window
        self.batch, self.hq, self.hkv, self.d = batch, hq, hkv, d
        self.keys: list[list[torch.Tensor]] = [[] for _ in range(batch)]  # [Hkv, D] per position
        self.values: list[list[torch.Tensor]] = [[] for _ in range(batch)]
        self.checks: list[Check] = []
        self.largest_chunk = 1
        plan.new(cache, capacity=capacity, window=window)

    @property
    def positions(self) -> list[int]:
        return [len(row) for row in self.keys]

    def append(self, counts: list[int]) -> None:
        """An append of max(counts) positions, row b taking counts[b] (counts left out when all
        take them)."""
        t = max(1, *counts)  # an append of t >= 1, every row perhaps taking none
        k, v = (cases.randn(self.g, self.batch, self.hkv, t, self.d) for _ in range(2))
        for b, n in enumerate(counts):
            self.keys[b] += list(k[b, :, :n].unbind(1))
            self.values[b] += list(v[b, :, :n].unbind(1))
        ragged = min(counts) < t
        self.plan.append(
            self.cache,
            cases.padded(k, counts) if ragged else k,
            cases.padded(v, counts) if ragged else v,
            cases.counts(*counts) if ragged else None,
        )
        self.largest_chunk = max(self.largest_chunk, *counts)  # a chunk for the rows that took it

    def chunk(self, t: int, what: str) -> Check:
        """Every row appends t positions, then attend_chunk with their t queries."""
        self.append([t] * self.batch)
        q = cases.randn(self.g, self.batch, self.hq, t, self.d)
        at = torch.tensor(self.positions)[:, None] - t + torch.arange(t)  # [B, t]
        return self._check(self.plan.attend_chunk(self.cache, q), q, at, what)

    def attend(self, what: str) -> Check:
        """attend with each row's newest query (a row of length 0 answers zeros)."""
        q = cases.randn(self.g, self.batch, self.hq, 1, self.d)
        at = torch.tensor(self.positions)[:, None] - 1  # [B, 1]: -1 sees nothing
        return self._check(self.plan.attend(self.cache, q), q, at, what)

    def release(self, row: int) -> None:
        self.plan.release(self.cache, row)
        self.keys[row], self.values[row] = [], []

    def truncate(self, lengths: list[int]) -> None:
        self.plan.truncate(self.cache, cases.counts(*lengths))
        for b, n in enumerate(lengths):
            self.keys[b], self.values[b] = self.keys[b][:n], self.values[b][:n]

    def state(self) -> int:
        return self.plan.state(self.cache, STATE_8)

    def _check(self, index: int, q: torch.Tensor, at: torch.Tensor, what: str) -> Check:
        k, v = self.history()
        want = reference.attention_at(q, k, v, at, self.window)
        likely = {}
        t = q.shape[2]
        if t > 1:
            newest = at[:, -1:].expand_as(at)  # every query at its row's newest position
            likely[OWN_FUTURE] = reference.attention_at(q, k, v, newest, self.window)
            likely[TOP_LEFT] = reference.attention_at(
                q, k, v, torch.arange(t).expand_as(at), self.window
            )
        if self.window is not None:
            likely[WIDER] = reference.attention_at(q, k, v, at, self.window + 1)
            if self.window > 1:
                likely[NARROWER] = reference.attention_at(q, k, v, at, self.window - 1)
            likely[NO_WINDOW] = reference.attention_at(q, k, v, at, self.window + t - 1)
        check = Check(index, want, what, likely)
        self.checks.append(check)
        return check

    def history(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's keys and values, [B, Hkv, T, D], position p at index p, zeros past a row's
        end (no query sees them: they are after its position)."""
        span = max(1, *self.positions)
        k = torch.zeros(self.batch, self.hkv, span, self.d)
        v = torch.zeros(self.batch, self.hkv, span, self.d)
        for b in range(self.batch):
            if self.keys[b]:
                k[b, :, : len(self.keys[b])] = torch.stack(self.keys[b], 1)
                v[b, :, : len(self.values[b])] = torch.stack(self.values[b], 1)
        return k, v


def require_checks(results: Results, checks: list[Check], case: str) -> None:
    """Fail at the first attend whose output is not the judge's answer, naming the likely
    mistake it matches."""
    for check in checks:
        got = tensor(results[check.index], f"{case}: {check.what}")
        require_shape(got, tuple(check.want.shape), f"{case}: {check.what}")
        require_close(
            [got],
            [check.want],
            TOL,
            case=f"{case}: {check.what}",
            likely={label: [out] for label, out in check.likely.items()},
        )


def lengths_of(state: dict, what: str, name: str = "lengths") -> list[int]:
    """cache.lengths (or positions) of a state snapshot as a list, Fail when it is not int64 [B]."""
    value = tensor(state[name], f"{what}: cache.{name}")
    if value.dtype != torch.int64 or value.dim() != 1:
        raise Fail(
            f"{what}: cache.{name} is a {value.dtype} tensor {list(value.shape)}, "
            "expected int64 [B]"
        )
    return value.tolist()
