"""What the hidden graders share: seeded case shapes, replayable case names, the newest-token
reference for long caches, and what the candidate's calls left of their inputs.

Every hidden case is generated from its seed alone (`BASE_SEED` plus an offset per item and case):
the shapes, the chunk sizes and the tensors. A failure names the seed and says what kind of case
it was; it never prints an input, so a candidate learns which concern failed, not the case itself.
To replay one, rebuild the case from its seed in the item's file.
"""

from __future__ import annotations

import torch

from graders import reference
from graders.candidate import Candidate, CandidateError, CandidateTimeout, Fail, Plan, Results

BASE_SEED = 7000


def name(seed: int, what: str) -> str:
    """How a hidden case names itself in messages (grade.py puts "hidden case: " in front)."""
    return f"seed {seed} ({what})"


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
    """Row n-1 of the full causal forward over the first n positions of `seq`: [B, Hq, 1, D], float64.

    With the newest query alone, the causal mask lets it see all n positions, so
    `reference.causal_attention` over the n-position prefix gives that row without building the
    n x n scores of every row (which long caches cannot afford).
    """
    return reference.causal_attention(seq["q"][:, :, n - 1 : n], seq["k"][:, :, :n], seq["v"][:, :, :n])


def run(candidate: Candidate, plan: Plan, case: str) -> tuple[Results, list[dict | None]]:
    """Run `plan`; a crash, hang or unexpected exception is reported with `case` in front.

    Also returns, per operation, the tensor inputs as the candidate left them (`None` unless the
    operation was sent with `return_inputs`). `Candidate.run` keeps only the operations' values,
    so the worker's replies are read through a recorder standing in for the worker.
    """
    recorder = _Recorder(candidate.worker)
    try:
        results = Candidate(recorder, candidate.timeout).run(plan)
    except CandidateTimeout as exc:
        raise CandidateTimeout(f"{case}: {exc}") from None
    except CandidateError as exc:
        raise CandidateError(f"{case}: {exc}") from None
    inputs = [reply.get("inputs_after") for reply in recorder.reply.body["results"]]
    return results, inputs


class _Recorder:
    """The candidate's worker, keeping the last reply (whose body holds `inputs_after`)."""

    def __init__(self, worker):
        self.worker = worker
        self.reply = None

    def run(self, requests: list[dict], timeout: float, parallel: int = 1):
        replies = self.worker.run(requests, timeout, parallel)
        self.reply = replies[0]
        return replies


def require_unchanged(sent: dict[str, torch.Tensor], after: dict | None, call: str, case: str) -> None:
    """Fail unless every input in `sent` came back from `call` with the same shape, dtype and
    values (NaN where NaN was sent)."""
    for arg, tensor in sent.items():
        back = (after or {}).get(arg)
        same = (isinstance(back, torch.Tensor) and back.shape == tensor.shape
                and back.dtype == tensor.dtype
                and bool(((back == tensor) | (back.isnan() & tensor.isnan())).all()))
        if not same:
            raise Fail(f"{case}: {call} modified its `{arg}` argument in place; the caller still "
                       "owns it (an in-place op on the argument, or on a view of it?)")
