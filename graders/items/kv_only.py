"""kv-only: decode_step projects only the new token and caches only K and V.

Two mistakes the question names as down-level tells look fine from the outputs alone:
re-projecting the whole prefix every step (`recomputes-projections`) and caching queries
(`caches-q`). So this item looks at what happened, measured in the worker by trusted code:
how many token rows each of wq, wk and wv multiplied at every step, and which tensors the cache
object holds afterwards (searched for the layer's queries and hidden states, computed here).
Output numerics with RoPE are `rope-absolute`'s business (L6); here the values are checked, as
they carry no rotation.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape

ITEM = "kv-only"

B, D_MODEL, HEADS, HEAD_DIM, STEPS, ROPE_BASE = 2, 24, 4, 8, 5, 10000.0


def grade(candidate: Candidate) -> str:
    g = cases.generator(40)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    x = cases.randn(g, B, STEPS, D_MODEL)  # [B, T, d_model]
    full = reference.attention_layer(x, weights, HEADS, HEADS, ROPE_BASE)

    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, ROPE_BASE)
    plan.new("c")
    steps = [plan.decode_step("L", "c", x[:, t : t + 1]) for t in range(STEPS)]
    held = plan.inventory("c", probes={
        "queries": full["q_raw"].transpose(1, 2).reshape(-1, HEAD_DIM),  # [B * T * H, D]
        "rotated queries": full["q"].transpose(1, 2).reshape(-1, HEAD_DIM),
        "hidden states": x.reshape(-1, D_MODEL),  # [B * T, d_model]
    })
    state = plan.state("c")
    results = candidate.run(plan)

    for t, index in enumerate(steps):
        out = tensor(results[index]["output"], f"decode_step's output at step {t}")
        require_shape(out, (B, 1, D_MODEL), f"decode_step's output at step {t}")
    _check_projections(candidate, [results[i]["rows"] for i in steps])
    _check_cache_contents(candidate, results[held]["held"])

    values = tensor(results[state]["values"], "cache.values after decode_step")
    require_shape(values, (B, HEADS, STEPS, HEAD_DIM), "cache.values after decode_step")
    if first_divergence([values], [full["v"]], TOLERANCE[torch.float32]):
        raise Fail("cache.values does not hold the new tokens' values (v = wv(x), per head, in "
                   "order): decode_step must append the projected v of each new token")
    return (f"{STEPS} decode steps: wq, wk, wv saw {B} rows each per step; "
            "the cache holds the projected values and no queries or hidden states")


def _check_projections(candidate: Candidate, rows_per_step: list[dict]) -> None:
    recomputed = [(t, rows) for t, rows in enumerate(rows_per_step)
                  if rows["wk"] > B or rows["wv"] > B]
    if recomputed:
        t, rows = recomputed[-1]
        message = (f"at step {t}, wk and wv projected {rows['wk']} and {rows['wv']} rows for "
                   f"{B} new tokens: the prefix is projected again every step")
        candidate.tell("recomputes-projections", True, message)
        raise Fail(message)
    candidate.tell("recomputes-projections", False, "each step projects only the new tokens")
    for t, rows in enumerate(rows_per_step):
        for name, seen in rows.items():
            if seen != B:
                raise Fail(f"at step {t}, {name} projected {seen} rows, expected one per row of "
                           f"the batch ({B}): project exactly the new token with layer.{name}")


def _check_cache_contents(candidate: Candidate, held: dict[str, list[str]]) -> None:
    queries = held["queries"] + held["rotated queries"]
    if queries:
        message = f"the cache holds past queries (in {queries[0]}), which no later step reads"
        candidate.tell("caches-q", True, message)
        raise Fail(message)
    candidate.tell("caches-q", False, "no queries found in the cache")
    if held["hidden states"]:
        raise Fail(f"the cache holds hidden states (in {held['hidden states'][0]}): cache the "
                   "projected keys and values instead")
