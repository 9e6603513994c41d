"""Hidden validate-shapes: the incompatible calls the public item does not make, on caches that
already hold chunked appends.

Seeded shapes (batch and kv_heads 2 to 4); each bad call runs on its own cache, which holds a
few appends of several positions (so storage has room to spare), and its state before and after
must be equal, as in the public item. The public item changes each dimension in one direction;
these go the other way, or hide the mistake where a loose check lets it through:
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

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.hidden import _cases
from graders.items.validate_shapes import bad_call, require_rejected

ITEM = "validate-shapes"

SEEDS = [_cases.BASE_SEED + 400 + i for i in range(2)]


def grade(candidate: Candidate) -> str:
    calls = sum(_check(candidate, seed) for seed in SEEDS)
    return f"{len(SEEDS)} seeded cases, {calls} incompatible calls: ValueError, cache unchanged"


def _check(candidate: Candidate, seed: int) -> int:
    g = cases.generator(seed)
    B, H, D = _cases.randint(g, 2, 4), _cases.randint(g, 2, 4), _cases.choice(g, (4, 8, 16))
    case = _cases.name(seed, f"{_cases.shape(B, H, D, 'kv head')}, after chunked appends")
    history = cases.sequence(g, B, H, H, 9, D)
    appends = _cases.chunks(g, 9, 4)

    def kv(*shape):
        return {"key": cases.randn(g, *shape), "value": cases.randn(g, *shape)}

    def counts(*shape, bad_row_value=None):
        c = torch.ones(*shape, dtype=torch.int64)
        if bad_row_value is not None:
            c[0] = bad_row_value
        return c

    bad = [  # what the call is, operation, its inputs
        ("append with a larger batch", "append", kv(B + 1, H, 1, D)),
        ("append with fewer kv_heads", "append", kv(B, H - 1, 1, D)),
        ("append with a smaller head_dim", "append", kv(B, H, 1, D // 2)),
        ("append of a 5-d key and value", "append", kv(1, B, H, 1, D)),
        ("append whose key and value differ in kv_heads", "append",
         {"key": cases.randn(g, B, H, 1, D), "value": cases.randn(g, B, H + 1, 1, D)}),
        ("append whose key and value differ in head_dim", "append",
         {"key": cases.randn(g, B, H, 2, D), "value": cases.randn(g, B, H, 2, 2 * D)}),
        ("append with counts of shape [B, 1]", "append",
         {**kv(B, H, 1, D), "counts": counts(B, 1)}),
        ("append with a count larger than t in row 0", "append",
         {**kv(B, H, 2, D), "counts": counts(B, bad_row_value=3)}),
        ("append with a negative count in row 0", "append",
         {**kv(B, H, 2, D), "counts": counts(B, bad_row_value=-1)}),
        ("attend with one query head on several kv heads", "attend",
         {"query": cases.randn(g, B, 1, 1, D)}),
        ("attend with a query of a smaller batch", "attend",
         {"query": cases.randn(g, B - 1, H, 1, D)}),
        ("attend with a query of a smaller head_dim", "attend",
         {"query": cases.randn(g, B, H, 1, D // 2)}),
    ]
    plan = Plan()
    checks = []
    for i, (what, op, inputs) in enumerate(bad):
        plan.new(f"c{i}")
        total = 0
        for t in appends:
            plan.append(f"c{i}", history["k"][:, :, total : total + t],
                        history["v"][:, :, total : total + t])
            total += t
        checks.append((f"{case}: {what}", *bad_call(plan, f"c{i}", op, inputs)))
    plan.new("first")
    checks.append((f"{case}: a first append (empty cache) with counts of shape [B, 1]",
                   *bad_call(plan, "first", "append", {**kv(B, H, 1, D), "counts": counts(B, 1)})))
    good = kv(B, H, 2, D)
    plan.append("first", good["key"], good["value"])
    good_after = plan.state("first")
    results = _cases.run(candidate, plan, case)

    for what, *ops in checks:
        require_rejected(results, what, *ops)
    keys = tensor(results[good_after]["keys"], f"{case}: cache.keys")
    if keys.shape != good["key"].shape or not torch.equal(keys, good["key"]):
        raise Fail(f"{case}: after a rejected first append, a good append did not leave exactly "
                   "its keys in the cache: the rejected call left something behind")
    return len(checks)
