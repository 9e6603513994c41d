"""validate-shapes: incompatible shapes raise ValueError and leave the cache exactly as it was.

Every bad call runs on a cache of its own, holding one good append ([2, 3, 2, 8] float32), and the
cache's state (keys, values, lengths, capacity) is read before and after it. So each case shows
on its own the three ways candidates get this wrong: no check at all (a silent broadcast or a
write of the wrong rows), a check that lets torch raise RuntimeError somewhere inside, and a check
made after the cache has already grown or been written ("validate, then mutate" done backwards)
(graders.dense.bad_calls). A bad first append on an empty cache must leave it empty too, and a good
append must still work. The wording of the error is free; the candidate's messages are shown in
the pass message.

Public: each dimension changed in one direction, counts of the wrong shape, dtype or range, and
bad queries.

Hidden, seeded shapes (batch and kv_heads 2 to 4), each bad call on a cache holding a few
appends of several positions (so storage has room to spare); these go the other way, or hide
the mistake where a loose check lets it through:
- a larger batch, fewer kv_heads, a smaller head_dim, a 5-d key;
- key and value that differ in kv_heads or head_dim only (the public pair differs in time);
- counts of shape [B, 1]: the right number of elements, the wrong shape (a check on `numel`
  passes it, and it then broadcasts against the lengths);
- a count out of range in the first row rather than the last;
- a query with ONE head on several kv heads (1 % Hkv != 0, while Hkv % 1 == 0: a check written
  the wrong way round passes it), a smaller batch, a smaller head_dim;
- counts of shape [B, 1] as the very first append, which must leave the cache empty.
"""

from __future__ import annotations

import torch

from graders.dense.bad_calls import bad_call, on_own_caches, require_rejected
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases
from graders.shared.plans import Fail, Plan, tensor

ITEM = "validate-shapes"

B, H, T, D = 2, 3, 2, 8
HIDDEN_SEEDS = [400 + i for i in range(2)]


def grade(candidate: Candidate) -> str:
    g = cases.generator(50)
    k, v = cases.randn(g, B, H, T, D), cases.randn(g, B, H, T, D)
    bad = _public_bad_calls(g)
    plan = Plan()
    calls = on_own_caches(plan, k, v, [call for _, call in bad])
    plan.new("empty")
    calls.append(
        bad_call(
            plan,
            "empty",
            "attend",
            {"query": cases.randn(g, B, H, 1, D)},
            "attend on an empty cache",
        )
    )
    plan.new("first")
    calls.append(
        bad_call(
            plan,
            "first",
            "append",
            {"key": k, "value": k[..., : D // 2]},
            "a first append (empty cache) whose key and value shapes differ",
        )
    )
    plan.append("first", k, v)
    good_after = plan.state("first")
    results = candidate.run(plan)

    tags = [tag for tag, _ in bad] + ["empty attend", "first append"]
    messages = [f"{tag}: {require_rejected(results, call)!r}" for tag, call in zip(tags, calls)]
    state = results[good_after]
    keys = tensor(state["keys"], "cache.keys")
    lengths = state["lengths"]  # its type is length-vs-capacity's business, not this item's
    lengths = lengths.tolist() if isinstance(lengths, torch.Tensor) else [lengths] * B
    if lengths != [T] * B or keys.shape != k.shape or not torch.equal(keys, k):
        raise Fail(
            f"after a rejected first append, a good append of {list(k.shape)} left "
            f"lengths {lengths} and keys of shape {list(keys.shape)}, expected "
            f"lengths {[T] * B} and the appended keys: the rejected call left something "
            "behind"
        )
    return (
        f"{len(calls)} incompatible calls raised ValueError and left the cache unchanged; "
        f"messages: {'; '.join(messages)}"
    )


def grade_hidden(candidate: Candidate) -> str:
    calls = sum(_check_hidden(candidate, seed) for seed in hidden_cases.seeds(HIDDEN_SEEDS))
    return (
        f"{len(HIDDEN_SEEDS)} seeded cases, {calls} incompatible calls: ValueError, cache unchanged"
    )


def _public_bad_calls(g: torch.Generator) -> list[tuple[str, tuple[str, str, dict]]]:
    """(tag, (what, op, inputs)) of each bad call on a cache holding [2, 3, 2, 8]."""

    def kv(*shape):
        return {"key": cases.randn(g, *shape), "value": cases.randn(g, *shape)}

    return [
        ("rank", ("append with a 3-d key and value", "append", kv(H, 1, D))),
        (
            "key/value",
            (
                "append whose key and value shapes differ",
                "append",
                {"key": cases.randn(g, B, H, 1, D), "value": cases.randn(g, B, H, 2, D)},
            ),
        ),
        ("batch", ("append with a different batch size", "append", kv(1, H, 1, D))),
        ("kv_heads", ("append with a different kv_heads", "append", kv(B, H + 1, 1, D))),
        ("head_dim", ("append with a different head_dim", "append", kv(B, H, 1, 2 * D))),
        (
            "counts shape",
            (
                "append with counts of shape [3] for a batch of 2",
                "append",
                {**kv(B, H, 1, D), "counts": cases.counts(1, 1, 1)},
            ),
        ),
        (
            "int32 counts",
            (
                "append with int32 counts",
                "append",
                {**kv(B, H, 1, D), "counts": torch.tensor([1, 1], dtype=torch.int32)},
            ),
        ),
        (
            "float counts",
            (
                "append with float counts",
                "append",
                {**kv(B, H, 1, D), "counts": torch.tensor([1.0, 1.0])},
            ),
        ),
        (
            "negative count",
            (
                "append with a negative count",
                "append",
                {**kv(B, H, 2, D), "counts": cases.counts(2, -1)},
            ),
        ),
        (
            "count > t",
            (
                "append with a count larger than t",
                "append",
                {**kv(B, H, 2, D), "counts": cases.counts(1, 3)},
            ),
        ),
        (
            "query batch",
            (
                "attend with a query of another batch size",
                "attend",
                {"query": cases.randn(g, B + 1, H, 1, D)},
            ),
        ),
        (
            "query head_dim",
            (
                "attend with a query of another head_dim",
                "attend",
                {"query": cases.randn(g, B, H, 1, 2 * D)},
            ),
        ),
        (
            "query heads",
            (
                "attend with 4 query heads on 3 kv_heads",
                "attend",
                {"query": cases.randn(g, B, H + 1, 1, D)},
            ),
        ),
    ]


def _check_hidden(candidate: Candidate, seed: int) -> int:
    """The hidden bad calls of one seed, each on a cache holding chunked appends, then a bad
    first append and a good one; returns the number of bad calls."""
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 2, 4), cases.randint(g, 2, 4), cases.choice(g, (4, 8, 16))
    case = hidden_cases.name(
        seed, f"{hidden_cases.shape(B, H, D, 'kv head')}, after chunked appends"
    )
    history = cases.sequence(g, B, H, H, 9, D)
    appends = cases.chunks(g, 9, 4)
    bad = _hidden_bad_calls(g, B, H, D)
    plan = Plan()
    calls = []
    for i, (what, op, inputs) in enumerate(bad):
        plan.new(f"c{i}")
        total = 0
        for t in appends:
            plan.append(
                f"c{i}",
                history["k"][:, :, total : total + t],
                history["v"][:, :, total : total + t],
            )
            total += t
        calls.append(bad_call(plan, f"c{i}", op, inputs, f"{case}: {what}"))
    plan.new("first")
    first = {
        "key": cases.randn(g, B, H, 1, D),
        "value": cases.randn(g, B, H, 1, D),
        "counts": torch.ones(B, 1, dtype=torch.int64),
    }
    calls.append(
        bad_call(
            plan,
            "first",
            "append",
            first,
            f"{case}: a first append (empty cache) with counts of shape [B, 1]",
        )
    )
    good = {"key": cases.randn(g, B, H, 2, D), "value": cases.randn(g, B, H, 2, D)}
    plan.append("first", good["key"], good["value"])
    good_after = plan.state("first")
    results = hidden_cases.run(candidate, plan, case)

    for call in calls:
        require_rejected(results, call)
    keys = tensor(results[good_after]["keys"], f"{case}: cache.keys")
    if keys.shape != good["key"].shape or not torch.equal(keys, good["key"]):
        raise Fail(
            f"{case}: after a rejected first append, a good append did not leave exactly "
            "its keys in the cache: the rejected call left something behind"
        )
    return len(calls)


def _hidden_bad_calls(g: torch.Generator, B: int, H: int, D: int) -> list[tuple[str, str, dict]]:
    """(what, op, inputs) of each hidden bad call on a cache of batch B, H kv heads, head_dim D."""

    def kv(*shape):
        return {"key": cases.randn(g, *shape), "value": cases.randn(g, *shape)}

    def counts(*shape, bad_row_value=None):
        c = torch.ones(*shape, dtype=torch.int64)
        if bad_row_value is not None:
            c[0] = bad_row_value
        return c

    return [
        ("append with a larger batch", "append", kv(B + 1, H, 1, D)),
        ("append with fewer kv_heads", "append", kv(B, H - 1, 1, D)),
        ("append with a smaller head_dim", "append", kv(B, H, 1, D // 2)),
        ("append of a 5-d key and value", "append", kv(1, B, H, 1, D)),
        (
            "append whose key and value differ in kv_heads",
            "append",
            {"key": cases.randn(g, B, H, 1, D), "value": cases.randn(g, B, H + 1, 1, D)},
        ),
        (
            "append whose key and value differ in head_dim",
            "append",
            {"key": cases.randn(g, B, H, 2, D), "value": cases.randn(g, B, H, 2, 2 * D)},
        ),
        (
            "append with counts of shape [B, 1]",
            "append",
            {**kv(B, H, 1, D), "counts": counts(B, 1)},
        ),
        (
            "append with a count larger than t in row 0",
            "append",
            {**kv(B, H, 2, D), "counts": counts(B, bad_row_value=3)},
        ),
        (
            "append with a negative count in row 0",
            "append",
            {**kv(B, H, 2, D), "counts": counts(B, bad_row_value=-1)},
        ),
        (
            "attend with one query head on several kv heads",
            "attend",
            {"query": cases.randn(g, B, 1, 1, D)},
        ),
        (
            "attend with a query of a smaller batch",
            "attend",
            {"query": cases.randn(g, B - 1, H, 1, D)},
        ),
        (
            "attend with a query of a smaller head_dim",
            "attend",
            {"query": cases.randn(g, B, H, 1, D // 2)},
        ),
    ]
