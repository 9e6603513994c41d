"""validate-shapes: incompatible shapes raise ValueError and leave the cache exactly as it was.

Every bad call runs on a cache of its own, holding one good append ([2, 3, 2, 8] float32), and the
cache's state (keys, values, lengths, capacity) is read before and after it. So each case shows
on its own the three ways candidates get this wrong: no check at all (a silent broadcast or a
write of the wrong rows), a check that lets torch raise RuntimeError somewhere inside, and a check
made after the cache has already grown or been written ("validate, then mutate" done backwards).
A bad first append on an empty cache must leave it empty too, and a good append must still work.
The wording of the error is free; the candidate's messages are shown in the pass message.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, Raised, tensor

ITEM = "validate-shapes"

B, H, T, D = 2, 3, 2, 8
STATE = ("keys", "values", "lengths", "capacity")


def grade(candidate: Candidate) -> str:
    g = cases.generator(50)
    k, v = cases.randn(g, B, H, T, D), cases.randn(g, B, H, T, D)

    def kv(*shape):
        return {"key": cases.randn(g, *shape), "value": cases.randn(g, *shape)}

    bad = [  # tag, what the call is, operation, its inputs
        ("rank", "append with a 3-d key and value", "append", kv(H, 1, D)),
        ("key/value", "append whose key and value shapes differ", "append",
         {"key": cases.randn(g, B, H, 1, D), "value": cases.randn(g, B, H, 2, D)}),
        ("batch", "append with a different batch size", "append", kv(1, H, 1, D)),
        ("kv_heads", "append with a different kv_heads", "append", kv(B, H + 1, 1, D)),
        ("head_dim", "append with a different head_dim", "append", kv(B, H, 1, 2 * D)),
        ("counts shape", "append with counts of shape [3] for a batch of 2", "append",
         {**kv(B, H, 1, D), "counts": cases.counts(1, 1, 1)}),
        ("int32 counts", "append with int32 counts", "append",
         {**kv(B, H, 1, D), "counts": torch.tensor([1, 1], dtype=torch.int32)}),
        ("float counts", "append with float counts", "append",
         {**kv(B, H, 1, D), "counts": torch.tensor([1.0, 1.0])}),
        ("negative count", "append with a negative count", "append",
         {**kv(B, H, 2, D), "counts": cases.counts(2, -1)}),
        ("count > t", "append with a count larger than t", "append",
         {**kv(B, H, 2, D), "counts": cases.counts(1, 3)}),
        ("query batch", "attend with a query of another batch size", "attend",
         {"query": cases.randn(g, B + 1, H, 1, D)}),
        ("query head_dim", "attend with a query of another head_dim", "attend",
         {"query": cases.randn(g, B, H, 1, 2 * D)}),
        ("query heads", "attend with 4 query heads on 3 kv_heads", "attend",
         {"query": cases.randn(g, B, H + 1, 1, D)}),
    ]
    plan = Plan()
    checks = bad_calls(plan, k, v, bad)
    plan.new("empty")
    checks.append(("empty attend", "attend on an empty cache",
                   *bad_call(plan, "empty", "attend", {"query": cases.randn(g, B, H, 1, D)})))
    plan.new("first")
    checks.append(("first append", "a first append (empty cache) whose key and value shapes differ",
                   *bad_call(plan, "first", "append", {"key": k, "value": k[..., : D // 2]})))
    plan.append("first", k, v)
    good_after = plan.state("first")
    results = candidate.run(plan)

    messages = [f"{tag}: {require_rejected(results, what, *ops)!r}" for tag, what, *ops in checks]
    state = results[good_after]
    keys = tensor(state["keys"], "cache.keys")
    lengths = state["lengths"]  # its type is length-vs-capacity's business, not this item's
    lengths = lengths.tolist() if isinstance(lengths, torch.Tensor) else [lengths] * B
    if lengths != [T] * B or keys.shape != k.shape or not torch.equal(keys, k):
        raise Fail(f"after a rejected first append, a good append of {list(k.shape)} left "
                   f"lengths {lengths} and keys of shape {list(keys.shape)}, expected "
                   f"lengths {[T] * B} and the appended keys: the rejected call left something "
                   "behind")
    return (f"{len(checks)} incompatible calls raised ValueError and left the cache unchanged; "
            f"messages: {'; '.join(messages)}")


def bad_calls(plan: Plan, k, v, bad: list) -> list[tuple]:
    """Each (tag, what, op, inputs) of `bad` on a cache of its own holding one good append of
    k and v: (tag, what, state before, the call, state after), as `bad_call` gives them."""
    checks = []
    for i, (tag, what, op, inputs) in enumerate(bad):
        plan.new(f"c{i}")
        plan.append(f"c{i}", k, v)
        checks.append((tag, what, *bad_call(plan, f"c{i}", op, inputs)))
    return checks


def bad_call(plan: Plan, cache: str, op: str, inputs: dict) -> tuple[int, int, int]:
    """Add `state`, the bad call (allowed to raise), `state`: their indices."""
    before = plan.state(cache)
    call = (plan.append(cache, inputs["key"], inputs["value"], inputs.get("counts"), may_raise=True)
            if op == "append" else plan.attend(cache, inputs["query"], may_raise=True))
    return before, call, plan.state(cache)


def require_rejected(results, what: str, before: int, call: int, after: int) -> str:
    """The candidate's ValueError message for the call; Fail unless it raised ValueError and the
    cache's state is the same after as before."""
    raised = results[call]
    if not isinstance(raised, Raised):
        raise Fail(f"{what} did not raise ValueError")
    if not raised.is_a("ValueError"):
        raise Fail(f"{what} raised {raised.type} ({raised.message!r}), expected ValueError: check "
                   "compatibility yourself before torch fails somewhere inside")
    for name in STATE:
        if _differs(results[before][name], results[after][name]):
            raise Fail(f"{what} raised ValueError but changed cache.{name}: check everything "
                       "before you write, grow or allocate anything")
    return raised.message[:80]


def _differs(a, b) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b)
    return type(a) is not type(b) or a != b
