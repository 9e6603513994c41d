"""validate-dtype-device: dtype and device mismatches raise ValueError; attend's output keeps the
query's dtype and device.

The first append fixes the cache's dtype and device. A later float64 append to a float32 cache
must not be cast silently (index writes and `torch.cat` happily convert, or regrow the storage in
the new dtype), and a tensor on another device (here `meta`, which any machine has) must be
refused before it reaches the storage. On the attend side, a float64 or meta query must be
refused, and a float64 cache read by a float64 query must answer in float64: a candidate who
returns the float32 softmax's product as it is passes every float32 test and fails here. The
query itself must come back unchanged (the contract: attend never modifies the query).
Each bad call runs on its own cache; its state before and after must be equal.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import require_shape
from graders.items.validate_shapes import bad_calls, require_rejected

ITEM = "validate-dtype-device"

B, H, T, D = 2, 2, 2, 8


def grade(candidate: Candidate) -> str:
    g = cases.generator(60)
    k, v, q = cases.randn(g, B, H, T, D), cases.randn(g, B, H, T, D), cases.randn(g, B, H, 1, D)
    k1, v1 = cases.randn(g, B, H, 1, D), cases.randn(g, B, H, 1, D)
    bad = [  # tag, what the call is, operation, its inputs
        ("float64", "append of float64 keys and values to a float32 cache", "append",
         {"key": k1.double(), "value": v1.double()}),
        ("value dtype", "append of a float32 key with a float64 value", "append",
         {"key": k1, "value": v1.double()}),
        ("device", "append of keys and values on the meta device to a CPU cache", "append",
         {"key": {"meta": k1}, "value": {"meta": v1}}),
        ("query dtype", "attend with a float64 query on a float32 cache", "attend",
         {"query": q.double()}),
        ("query device", "attend with a query on the meta device", "attend",
         {"query": {"meta": q}}),
    ]
    plan = Plan()
    checks = bad_calls(plan, k, v, bad)
    outputs = {}
    for dtype in (torch.float32, torch.float64):
        plan.new(str(dtype))
        plan.append(str(dtype), k.to(dtype), v.to(dtype))
        outputs[dtype] = plan.attend(str(dtype), q.to(dtype), return_inputs=True)
    results = candidate.run(plan)

    messages = [f"{tag}: {require_rejected(results, what, *ops)!r}" for tag, what, *ops in checks]
    for dtype, index in outputs.items():
        what = f"attend's output for a {str(dtype)[6:]} cache and query"
        out = tensor(results[index], what)
        require_shape(out, (B, H, 1, D), what)
        if out.dtype != dtype:
            raise Fail(f"{what} is {str(out.dtype)[6:]}: return the query's dtype (compute the "
                       "softmax in float32 if you like, then cast the result back)")
        query_after = results.inputs_after(index)["query"]
        if query_after.dtype != dtype or not torch.equal(query_after, q.to(dtype)):
            raise Fail(f"attend changed the {str(dtype)[6:]} query it was given: work on a copy "
                       "(an in-place scale or cast writes into the caller's tensor)")
    return (f"{len(checks)} dtype/device mismatches raised ValueError and left the cache "
            f"unchanged; float32 and float64 outputs keep the query's dtype, on the CPU, and the "
            f"query is left as it was; "
            f"messages: {'; '.join(messages)}")
