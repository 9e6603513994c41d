"""validate-dtype-device: dtype and device mismatches raise ValueError; attend's output keeps the
query's dtype and device.

Public: the first append fixes the cache's dtype and device. A later float64 append to a float32 cache
must not be cast silently (index writes and `torch.cat` happily convert, or regrow the storage in
the new dtype), and a tensor on another device (here `meta`, which any machine has) must be
refused before it reaches the storage. On the attend side, a float64 or meta query must be
refused, and a float64 cache read by a float64 query must answer in float64: a candidate who
returns the float32 softmax's product as it is passes every float32 test and fails here. The
query itself must come back unchanged (the contract: attend never modifies the query).
Each bad call runs on its own cache; its state before and after must be equal
(graders.dense.bad_calls).

Hidden, on seeded shapes, each bad call on its own cache as in the public cases:
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

from graders.dense.bad_calls import bad_call, on_own_caches, require_rejected
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases
from graders.shared.compare import require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "validate-dtype-device"

B, H, T, D = 2, 2, 2, 8
HIDDEN_SEED = 500


def grade(candidate: Candidate) -> str:
    g = cases.generator(60)
    k, v, q = cases.randn(g, B, H, T, D), cases.randn(g, B, H, T, D), cases.randn(g, B, H, 1, D)
    k1, v1 = cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D)
    bad = [  # tag, (what the call is, operation, its inputs)
        (
            "float64",
            (
                "append of float64 keys and values to a float32 cache",
                "append",
                {"key": k1.double(), "value": v1.double()},
            ),
        ),
        (
            "value dtype",
            (
                "append of a float32 key with a float64 value",
                "append",
                {"key": k1, "value": v1.double()},
            ),
        ),
        (
            "device",
            (
                "append of keys and values on the meta device to a CPU cache",
                "append",
                {"key": {"meta": k1}, "value": {"meta": v1}},
            ),
        ),
        (
            "query dtype",
            ("attend with a float64 query on a float32 cache", "attend", {"query": q.double()}),
        ),
        (
            "query device",
            ("attend with a query on the meta device", "attend", {"query": {"meta": q}}),
        ),
    ]
    plan = Plan()
    calls = on_own_caches(plan, k, v, [call for _, call in bad])
    outputs = {}
    for dtype in (torch.float32, torch.float64):
        plan.new(str(dtype))
        plan.append(str(dtype), k.to(dtype), v.to(dtype))
        outputs[dtype] = plan.attend(str(dtype), q.to(dtype), return_inputs=True)
    results = candidate.run(plan)

    messages = [f"{tag}: {require_rejected(results, call)!r}" for (tag, _), call in zip(bad, calls)]
    for dtype, index in outputs.items():
        what = f"attend's output for a {str(dtype)[6:]} cache and query"
        out = tensor(results[index], what)
        require_shape(out, (B, H, 1, D), what)
        if out.dtype != dtype:
            raise Fail(
                f"{what} is {str(out.dtype)[6:]}: return the query's dtype (compute the "
                "softmax in float32 if you like, then cast the result back)"
            )
        query_after = results.inputs_after(index)["query"]
        if query_after.dtype != dtype or not torch.equal(query_after, q.to(dtype)):
            raise Fail(
                f"attend changed the {str(dtype)[6:]} query it was given: work on a copy "
                "(an in-place scale or cast writes into the caller's tensor)"
            )
    return (
        f"{len(calls)} dtype/device mismatches raised ValueError and left the cache "
        f"unchanged; float32 and float64 outputs keep the query's dtype, on the CPU, and the "
        f"query is left as it was; "
        f"messages: {'; '.join(messages)}"
    )


def grade_hidden(candidate: Candidate) -> str:
    seed = hidden_cases.seed(HIDDEN_SEED)
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 1, 3), cases.randint(g, 1, 3), cases.choice(g, (4, 8))
    case = hidden_cases.name(seed, hidden_cases.shape(B, H, D))
    k, v = cases.randn(g, B, H, 3, D), cases.randn(g, B, H, 3, D)
    k1, v1, q = cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D)
    plan = Plan()
    calls = []
    for i, (what, dtype, op, inputs) in enumerate(_hidden_bad_calls(k1, v1, q)):
        plan.new(f"c{i}")
        plan.append(f"c{i}", k.to(dtype), v.to(dtype))
        calls.append(bad_call(plan, f"c{i}", op, inputs, f"{case}: {what}"))
    plan.new("float64")
    for t in range(3):
        plan.append("float64", k[:, :, t : t + 1].double(), v[:, :, t : t + 1].double())
    output = plan.attend("float64", q.double())
    results = hidden_cases.run(candidate, plan, case)

    for call in calls:
        require_rejected(results, call)
    what = f"{case}: attend's output for a float64 cache and query after several appends"
    out = tensor(results[output], what)
    require_shape(out, (B, H, 1, D), what)
    if out.dtype != torch.float64:
        raise Fail(f"{what} is {str(out.dtype).removeprefix('torch.')}: return the query's dtype")
    return f"{len(calls)} more dtype/device mismatches raised ValueError, cache unchanged"


def _hidden_bad_calls(
    k1: torch.Tensor, v1: torch.Tensor, q: torch.Tensor
) -> list[tuple[str, torch.dtype, str, dict]]:
    """(what the call is, the cache's dtype, operation, its inputs) of each hidden bad call."""
    return [
        (
            "append of a CPU key with a value on the meta device",
            torch.float32,
            "append",
            {"key": k1, "value": {"meta": v1}},
        ),
        (
            "append of a key on the meta device with a CPU value",
            torch.float32,
            "append",
            {"key": {"meta": k1}, "value": v1},
        ),
        (
            "append of float16 keys and values to a float32 cache",
            torch.float32,
            "append",
            {"key": k1.half(), "value": v1.half()},
        ),
        (
            "append of bfloat16 keys and values to a float32 cache",
            torch.float32,
            "append",
            {"key": k1.bfloat16(), "value": v1.bfloat16()},
        ),
        (
            "append of int64 keys and values to a float32 cache",
            torch.float32,
            "append",
            {"key": k1.round().long(), "value": v1.round().long()},
        ),
        (
            "append of float32 keys and values to a float64 cache",
            torch.float64,
            "append",
            {"key": k1, "value": v1},
        ),
        (
            "attend with a float16 query on a float32 cache",
            torch.float32,
            "attend",
            {"query": q.half()},
        ),
        (
            "attend with a bfloat16 query on a float32 cache",
            torch.float32,
            "attend",
            {"query": q.bfloat16()},
        ),
        ("attend with a float32 query on a float64 cache", torch.float64, "attend", {"query": q}),
    ]
