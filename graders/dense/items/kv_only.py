"""kv-only: decode_step projects only the new token and caches only K and V.

Two mistakes the question names as down-level tells look fine from the outputs alone:
re-projecting the whole prefix every step (`recomputes-projections`) and caching queries
(`caches-q`). So this item looks at what happened, measured in the worker by trusted code:
how many token rows each of wq, wk and wv multiplied at every step, and which tensors the cache
object holds afterwards (searched for the layer's queries and hidden states, computed here).
Output numerics with RoPE are `rope-absolute`'s business (L6); here the values are checked, as
they carry no rotation.

Public: B=2, 5 steps; queries are looked for after the last step, among all the steps' queries,
and count as held when most are there.

Hidden: a cache that keeps only the newest query (`cache.q = q`, "for the next step") holds one
step's worth and slips under the public check. So (B=3, 4 heads, head_dim 8, d_model 40, 10
steps), after steps 1, 5 and 10 the cache is searched for that step's queries (before and after
RoPE) and hidden states, which no later step needs. At every step wq, wk and wv must each
project exactly the 3 new rows, and at the end the cache must hold every step's projected values
(found anywhere, in any layout). The layer is MHA: a GQA layer would fail here a cache that does
not support GQA, which is gqa's business (L6), not this item's. Outputs are not judged
(rope-absolute's business).
"""

from __future__ import annotations

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import TOLERANCE, first_divergence, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "kv-only"

B, D_MODEL, HEADS, HEAD_DIM, STEPS, ROPE_BASE = 2, 24, 4, 8, 5, 10000.0
HIDDEN_SEED = 1100
HIDDEN_B, HIDDEN_D_MODEL, HIDDEN_STEPS = 3, 40, 10  # heads, head_dim and RoPE as the public case
SEARCHED = (0, 4, 9)  # steps after which the hidden case's cache is searched


def grade(candidate: Candidate) -> str:
    g = cases.generator(40)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    x = cases.randn(g, B, STEPS, D_MODEL)  # [B, T, d_model]
    full = reference.attention_layer(x, weights, HEADS, HEADS, ROPE_BASE)

    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, ROPE_BASE)
    plan.new("c")
    steps = [plan.decode_step("L", "c", x[:, t : t + 1]) for t in range(STEPS)]
    held = plan.inventory(
        "c",
        probes={
            "queries": full["q_raw"].transpose(1, 2).reshape(-1, HEAD_DIM),  # [B * T * H, D]
            "rotated queries": full["q"].transpose(1, 2).reshape(-1, HEAD_DIM),
            "hidden states": x.reshape(-1, D_MODEL),  # [B * T, d_model]
        },
    )
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
        raise Fail(
            "cache.values does not hold the new tokens' values (v = wv(x), per head, in "
            "order): decode_step must append the projected v of each new token"
        )
    return (
        f"{STEPS} decode steps: wq, wk, wv saw {B} rows each per step; "
        "the cache holds the projected values and no queries or hidden states"
    )


def grade_hidden(candidate: Candidate) -> str:
    seed = hidden_cases.seed(HIDDEN_SEED)
    g = cases.generator(seed)
    case = hidden_cases.name(
        seed, f"{hidden_cases.shape(HIDDEN_B, HEADS, HEAD_DIM)}, {HIDDEN_STEPS} decode steps"
    )
    weights = cases.layer_weights(g, HIDDEN_D_MODEL, HEADS, HEADS, HEAD_DIM)
    x = cases.randn(g, HIDDEN_B, HIDDEN_STEPS, HIDDEN_D_MODEL)  # [B, T, d_model]
    full = reference.attention_layer(x, weights, HEADS, HEADS, ROPE_BASE)
    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, ROPE_BASE)
    plan.new("c")
    steps, searches = [], {}
    for t in range(HIDDEN_STEPS):
        steps.append(plan.decode_step("L", "c", x[:, t : t + 1]))
        if t in SEARCHED:
            searches[t] = plan.inventory("c", probes=_newest_probes(full, x, t))
    values = plan.inventory("c", probes={"values": full["v"].reshape(-1, HEAD_DIM)})
    results = hidden_cases.run(candidate, plan, case)

    for t, index in enumerate(steps):
        out = tensor(results[index]["output"], f"{case}: decode_step's output at step {t}")
        require_shape(
            out, (HIDDEN_B, 1, HIDDEN_D_MODEL), f"{case}: decode_step's output at step {t}"
        )
        for name, seen in results[index]["rows"].items():
            if seen != HIDDEN_B:
                raise Fail(
                    f"{case}: at step {t}, {name} projected {seen} rows for {HIDDEN_B} new "
                    f"tokens: project exactly the new token of each row with layer.{name}"
                )
    for t, index in searches.items():
        for probe, where in results[index]["held"].items():
            if where:
                raise Fail(
                    f"{case}: after step {t}, the cache holds {probe} (in {where[0]}): "
                    "no later step reads them; cache only K and V"
                )
    if not results[values]["held"]["values"]:
        raise Fail(
            f"{case}: after {HIDDEN_STEPS} steps, no tensor of the cache holds the "
            "projected values of the steps so far: decode_step must append v = wv(x) of "
            "each token"
        )
    return (
        f"B={HIDDEN_B}, {HIDDEN_STEPS} steps: {HIDDEN_B} rows projected by each of wq, wk, wv "
        "per step; no newest queries or hidden states in the cache after any searched step"
    )


def _check_projections(candidate: Candidate, rows_per_step: list[dict]) -> None:
    recomputed = [
        (t, rows) for t, rows in enumerate(rows_per_step) if rows["wk"] > B or rows["wv"] > B
    ]
    if recomputed:
        t, rows = recomputed[-1]
        message = (
            f"at step {t}, wk and wv projected {rows['wk']} and {rows['wv']} rows for "
            f"{B} new tokens: the prefix is projected again every step"
        )
        candidate.tell("recomputes-projections", True, message)
        raise Fail(message)
    candidate.tell("recomputes-projections", False, "each step projects only the new tokens")
    for t, rows in enumerate(rows_per_step):
        for name, seen in rows.items():
            if seen != B:
                raise Fail(
                    f"at step {t}, {name} projected {seen} rows, expected one per row of "
                    f"the batch ({B}): project exactly the new token with layer.{name}"
                )


def _check_cache_contents(candidate: Candidate, held: dict[str, list[str]]) -> None:
    queries = held["queries"] + held["rotated queries"]
    if queries:
        message = f"the cache holds past queries (in {queries[0]}), which no later step reads"
        candidate.tell("caches-q", True, message)
        raise Fail(message)
    candidate.tell("caches-q", False, "no queries found in the cache")
    if held["hidden states"]:
        raise Fail(
            f"the cache holds hidden states (in {held['hidden states'][0]}): cache the "
            "projected keys and values instead"
        )


def _newest_probes(full: dict, x: torch.Tensor, t: int) -> dict[str, torch.Tensor]:
    """What the cache must not hold after step t: that step's queries, before and after RoPE
    ([B * H, D] rows), and its hidden states ([B, d_model])."""

    def rows(heads: torch.Tensor) -> torch.Tensor:  # [B, H, T, D] -> [B * H, D] at step t
        return heads[:, :, t].reshape(-1, HEAD_DIM)

    return {
        "the newest queries": rows(full["q_raw"]),
        "the newest queries after RoPE": rows(full["q"]),
        "the newest hidden states": x[:, t],
    }
