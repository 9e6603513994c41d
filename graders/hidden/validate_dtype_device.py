"""Hidden validate-dtype-device: the dtype and device mismatches the public item does not send.

The public item appends float64 to a float32 cache, a float32 key with a float64 value, and key
and value both on the meta device. Here, on seeded shapes, each bad call on its own cache (state
equal before and after, as in the public item):
- key on the CPU with the value on the meta device, and the other way round: a check that looks
  at the key's device only lets the value through to the storage;
- half-precision (float16, bfloat16) and integer appends to a float32 cache, and a float32 append
  to a float64 cache: a check that only refuses float64, or only compares sizes, lets them in
  and casts silently;
- float16 and bfloat16 queries on a float32 cache, a float32 query on a float64 cache.
Then a float64 cache that grew over several appends must still answer a float64 query in float64
(storage regrown with a default-dtype `torch.zeros` would not be float64 any more).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import require_shape
from graders.hidden import _cases
from graders.items.validate_shapes import bad_call, require_rejected

ITEM = "validate-dtype-device"

SEED = _cases.BASE_SEED + 500


def grade(candidate: Candidate) -> str:
    g = cases.generator(SEED)
    B, H, D = _cases.randint(g, 1, 3), _cases.randint(g, 1, 3), _cases.choice(g, (4, 8))
    case = _cases.name(SEED, _cases.shape(B, H, D))
    k, v = cases.randn(g, B, H, 3, D), cases.randn(g, B, H, 3, D)
    k1, v1, q = cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D)
    bad = [  # what the call is, the cache's dtype, operation, its inputs
        ("append of a CPU key with a value on the meta device", torch.float32, "append",
         {"key": k1, "value": {"meta": v1}}),
        ("append of a key on the meta device with a CPU value", torch.float32, "append",
         {"key": {"meta": k1}, "value": v1}),
        ("append of float16 keys and values to a float32 cache", torch.float32, "append",
         {"key": k1.half(), "value": v1.half()}),
        ("append of bfloat16 keys and values to a float32 cache", torch.float32, "append",
         {"key": k1.bfloat16(), "value": v1.bfloat16()}),
        ("append of int64 keys and values to a float32 cache", torch.float32, "append",
         {"key": k1.round().long(), "value": v1.round().long()}),
        ("append of float32 keys and values to a float64 cache", torch.float64, "append",
         {"key": k1, "value": v1}),
        ("attend with a float16 query on a float32 cache", torch.float32, "attend",
         {"query": q.half()}),
        ("attend with a bfloat16 query on a float32 cache", torch.float32, "attend",
         {"query": q.bfloat16()}),
        ("attend with a float32 query on a float64 cache", torch.float64, "attend", {"query": q}),
    ]
    plan = Plan()
    checks = []
    for i, (what, dtype, op, inputs) in enumerate(bad):
        plan.new(f"c{i}")
        plan.append(f"c{i}", k.to(dtype), v.to(dtype))
        checks.append((f"{case}: {what}", *bad_call(plan, f"c{i}", op, inputs)))
    plan.new("float64")
    for t in range(3):
        plan.append("float64", k[:, :, t : t + 1].double(), v[:, :, t : t + 1].double())
    output = plan.attend("float64", q.double())
    results = _cases.run(candidate, plan, case)

    for what, *ops in checks:
        require_rejected(results, what, *ops)
    what = f"{case}: attend's output for a float64 cache and query after several appends"
    out = tensor(results[output], what)
    require_shape(out, (B, H, 1, D), what)
    if out.dtype != torch.float64:
        raise Fail(f"{what} is {str(out.dtype).removeprefix('torch.')}: return the query's dtype")
    return f"{len(checks)} more dtype/device mismatches raised ValueError, cache unchanged"
