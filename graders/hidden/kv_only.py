"""Hidden kv-only: three rows, ten steps, and the cache searched after several of them for the
newest step's queries and hidden states.

The public item looks for queries in the cache after its last step, among all the steps'
queries, and counts them held when most are there: a cache that keeps only the newest query
(`cache.q = q`, "for the next step") holds one step's worth and slips under it. Here (B=3, 4
heads, head_dim 8, d_model 40, 10 steps), after steps 1, 5 and 10 the cache is searched for that
step's queries (before and after RoPE) and hidden states, which no later step needs. At every
step wq, wk and wv must each project exactly the 3 new rows, and at the end the cache must hold
every step's projected values (found anywhere, in any layout). The layer is MHA: a GQA layer
would fail here a cache that does not support GQA, which is gqa's business (L6), not this
item's. Outputs are not judged (rope-absolute's business).
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import require_shape
from graders.hidden import _cases

ITEM = "kv-only"

SEED = _cases.BASE_SEED + 1100
B, D_MODEL, HEADS, HEAD_DIM, STEPS, ROPE_BASE = 3, 40, 4, 8, 10, 10000.0
SEARCHED = (0, 4, 9)  # steps after which the cache is searched


def grade(candidate: Candidate) -> str:
    g = cases.generator(SEED)
    case = _cases.name(SEED, f"{_cases.shape(B, HEADS, HEAD_DIM)}, {STEPS} decode steps")
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    x = cases.randn(g, B, STEPS, D_MODEL)  # [B, T, d_model]
    full = reference.attention_layer(x, weights, HEADS, HEADS, ROPE_BASE)

    def rows(heads: torch.Tensor, step: int) -> torch.Tensor:  # [B, H, T, D] -> [B * H, D]
        return heads[:, :, step].reshape(-1, HEAD_DIM)

    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, ROPE_BASE)
    plan.new("c")
    steps, searches = [], {}
    for t in range(STEPS):
        steps.append(plan.decode_step("L", "c", x[:, t : t + 1]))
        if t in SEARCHED:
            searches[t] = plan.inventory("c", probes={
                "the newest queries": rows(full["q_raw"], t),
                "the newest queries after RoPE": rows(full["q"], t),
                "the newest hidden states": x[:, t],
            })
    values = plan.inventory("c", probes={"values": full["v"].reshape(-1, HEAD_DIM)})
    results = _cases.run(candidate, plan, case)

    for t, index in enumerate(steps):
        out = tensor(results[index]["output"], f"{case}: decode_step's output at step {t}")
        require_shape(out, (B, 1, D_MODEL), f"{case}: decode_step's output at step {t}")
        for name, seen in results[index]["rows"].items():
            if seen != B:
                raise Fail(f"{case}: at step {t}, {name} projected {seen} rows for {B} new tokens: "
                           f"project exactly the new token of each row with layer.{name}")
    for t, index in searches.items():
        for probe, where in results[index]["held"].items():
            if where:
                raise Fail(f"{case}: after step {t}, the cache holds {probe} (in {where[0]}): "
                           "no later step reads them; cache only K and V")
    if not results[values]["held"]["values"]:
        raise Fail(f"{case}: after {STEPS} steps, no tensor of the cache holds the projected "
                   "values of the steps so far: decode_step must append v = wv(x) of each token")
    return (f"B={B}, {STEPS} steps: {B} rows projected by each of wq, wk, wv per step; no newest "
            "queries or hidden states in the cache after any searched step")
