"""Calls the contract says must raise ValueError and leave the cache exactly as it was.

A bad call goes into a plan between two snapshots of its cache (`bad_call`); after the run,
`require_rejected` fails unless it raised ValueError and both snapshots are equal. Each bad call
gets a cache of its own, so each shows on its own the three ways candidates get validation
wrong: no check at all (a silent broadcast or a write of the wrong rows), a check that lets
torch raise RuntimeError somewhere inside, and a check made after the cache has already grown or
been written ("validate, then mutate" done backwards).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders.shared.plans import Fail, Plan, Raised, Results

STATE = ("keys", "values", "lengths", "capacity")


class BadCall(NamedTuple):
    """A bad call in a plan: what it is in words, and the indices of its cache's state before
    it, of the call itself, and of the state after it."""

    what: str
    before: int
    call: int
    after: int


def bad_call(plan: Plan, cache: str, op: str, inputs: dict, what: str) -> BadCall:
    """Add `op` ("append" with inputs key, value and maybe counts; or "attend" with query) on
    `cache`, allowed to raise, between two snapshots of the cache's state."""
    before = plan.state(cache)
    call = (
        plan.append(cache, inputs["key"], inputs["value"], inputs.get("counts"), may_raise=True)
        if op == "append"
        else plan.attend(cache, inputs["query"], may_raise=True)
    )
    return BadCall(what, before, call, plan.state(cache))


def on_own_caches(
    plan: Plan, k: torch.Tensor, v: torch.Tensor, bad: list[tuple[str, str, dict]]
) -> list[BadCall]:
    """Each (what, op, inputs) of `bad` on a new cache of its own holding one good append of k
    and v."""
    calls = []
    for i, (what, op, inputs) in enumerate(bad):
        plan.new(f"c{i}")
        plan.append(f"c{i}", k, v)
        calls.append(bad_call(plan, f"c{i}", op, inputs, what))
    return calls


def require_rejected(results: Results, call: BadCall) -> str:
    """The candidate's ValueError message for the call; Fail unless it raised ValueError and the
    cache's state is the same after as before."""
    raised = results[call.call]
    if not isinstance(raised, Raised):
        raise Fail(f"{call.what} did not raise ValueError")
    if not raised.is_a("ValueError"):
        raise Fail(
            f"{call.what} raised {raised.type} ({raised.message!r}), expected ValueError: "
            "check compatibility yourself before torch fails somewhere inside"
        )
    for name in STATE:
        if _differs(results[call.before][name], results[call.after][name]):
            raise Fail(
                f"{call.what} raised ValueError but changed cache.{name}: check everything "
                "before you write, grow or allocate anything"
            )
    return raised.message[:80]


def _differs(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b)
    return type(a) is not type(b) or a != b
