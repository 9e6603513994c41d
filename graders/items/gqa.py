"""gqa: grouped-query and multi-query attention equal full attention with expanded heads, and the
cache stores kv_heads heads.

Query head h reads KV head h // G, G = Hq // Hkv (contiguous groups, as in Llama). The judge's
reference expands K and V with `repeat_interleave`; the cache must not: GQA exists to store Hkv
heads instead of Hq. Cases, a 3-position prompt then single tokens, every prefix compared:
- Hq/Hkv = 6/2 and 12/4: groups of 3, a group size different from the KV head count, so the
  other common mapping, h % Hkv (`repeat` instead of `repeat_interleave`, or a reshape to
  [B, G, Hkv, D]), differs for most heads and is named when the outputs match it;
- MQA (Hkv = 1) and MHA (Hkv = Hq), where both mappings agree: a grouped attend must still
  handle the edge cases (a broadcast over 4 query heads, a group of one);
- decode_step with a GQA layer (n_heads=6, n_kv_heads=2): outputs equal a full forward at every
  step and the cache holds 2 heads (a decode_step that repeats k and v for the query heads before
  appending gives right outputs from a cache 3x too big). When the outputs differ, an MHA layer
  is decoded too: if it differs as well, the fault is not in the heads (RoPE positions are
  rope-absolute's business) and only the GQA cache's heads are judged here. attend is judged
  before decode_step is called, so a stub decode_step hides no attend mistake.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_close, require_shape

ITEM = "gqa"

CASES = [  # name, Hq, Hkv, seed
    ("GQA 6/2 (groups of 3 over 2 KV heads)", 6, 2, 700),
    ("GQA 12/4 (groups of 3 over 4 KV heads)", 12, 4, 701),
    ("MQA 4/1", 4, 1, 702),
    ("MHA 4/4", 4, 4, 703),
]
B, T, D, PROMPT = 2, 7, 8, 3
LAYERS = {"GQA": (6, 2), "MHA": (2, 2)}  # decode_step: n_heads, n_kv_heads
D_MODEL, STEPS, BASE = 32, 5, 10000.0
TOL = TOLERANCE[torch.float32]


def grade(candidate: Candidate) -> str:
    _check_attend(candidate)
    heads, kv_heads = LAYERS["GQA"]
    where = f"decode_step with n_heads={heads}, n_kv_heads={kv_heads}"
    divergence = _decode(candidate, "GQA", where)
    layouts = (f"{len(CASES)} head layouts (GQA 6/2 and 12/4, MQA, MHA) within {TOL} of full "
               "attention with expanded heads at every prefix; caches keep kv_heads heads")
    if divergence is None:
        return f"{layouts}; {where} equals a full forward"
    if _decode(candidate, "MHA", "decode_step with an MHA layer"):
        return (f"{layouts}. decode_step's outputs are wrong for an MHA layer too, so they are not "
                "judged here (see rope-absolute)")
    raise Fail(f"{where}: {divergence}, while an MHA layer decodes right: does decode_step split "
               "k and v into n_kv_heads heads and let query head h read KV head "
               "h // (n_heads // n_kv_heads), as attend does?")


def _check_attend(candidate: Candidate) -> None:
    plan = Plan()
    attends, states = {}, {}
    for name, Hq, Hkv, seed in CASES:
        seq = cases.sequence(cases.generator(seed), B, Hq, Hkv, T, D)
        plan.new(name)
        plan.append(name, seq["k"][:, :, :PROMPT], seq["v"][:, :, :PROMPT])
        attends[name] = [plan.attend(name, seq["q"][:, :, PROMPT - 1 : PROMPT])]
        for t in range(PROMPT, T):
            plan.append(name, seq["k"][:, :, t : t + 1], seq["v"][:, :, t : t + 1])
            attends[name].append(plan.attend(name, seq["q"][:, :, t : t + 1]))
        states[name] = (seq, plan.state(name))
    results = candidate.run(plan)

    for name, Hq, Hkv, _ in CASES:
        seq, state = states[name]
        got = [tensor(results[i], f"{name}: attend's output at step {s}")
               for s, i in enumerate(attends[name])]
        for step, out in enumerate(got):
            require_shape(out, (B, Hq, 1, D), f"{name}: attend's output at step {step}")
        full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, Hq, T, D]
        group = Hq // Hkv
        wrong = reference.causal_attention(seq["q"], seq["k"].repeat(1, group, 1, 1),
                                           seq["v"].repeat(1, group, 1, 1))  # head h reads h % Hkv
        require_close(got, _newest(full), TOL, case=name, step_name="prefix length",
                      first_step=PROMPT, likely={
                          "GQA head mapping? query head h must read KV head h // (Hq // Hkv), "
                          "not h % Hkv (repeat_interleave, not repeat)": _newest(wrong)})
        _require_kv_heads(results[state], Hkv, Hq, f"{name}: after {T} positions")


def _decode(candidate: Candidate, kind: str, where: str) -> str | None:
    """Decode STEPS tokens with the `kind` layer; check the cache's heads; how the outputs first
    leave the full forward's, or None."""
    heads, kv_heads = LAYERS[kind]
    g = cases.generator(710 + heads)
    weights = cases.layer_weights(g, D_MODEL, heads, kv_heads, D)
    x = cases.randn(g, B, STEPS, D_MODEL)
    plan = Plan()
    plan.layer("L", weights, heads, kv_heads, D, BASE)
    plan.new("c")
    steps = [plan.decode_step("L", "c", x[:, t : t + 1]) for t in range(STEPS)]
    state = plan.state("c")
    results = candidate.run(plan)

    _require_kv_heads(results[state], kv_heads, heads, f"{where}, after {STEPS} steps")
    expected = reference.attention_layer(x, weights, heads, kv_heads, BASE)["out"]  # [B, T, d]
    got = []
    for t, index in enumerate(steps):
        out = tensor(results[index]["output"], f"{where}: output at step {t}")
        require_shape(out, (B, 1, D_MODEL), f"{where}: output at step {t}")
        got.append(out[:, None])  # [B, 1, 1, d_model]
    divergence = first_divergence(got, [expected[:, None, t : t + 1] for t in range(STEPS)], TOL)
    return None if divergence is None else (
        f"output first differs from a full forward at step {divergence.step}, row "
        f"{divergence.row}: max abs error {divergence.max_abs:.2e} (tolerance {TOL})")


def _newest(full: torch.Tensor) -> list[torch.Tensor]:
    return [full[:, :, t : t + 1] for t in range(PROMPT - 1, T)]


def _require_kv_heads(state: dict, kv_heads: int, q_heads: int, where: str) -> None:
    """cache.keys and values hold kv_heads heads (their other sizes are other items' business)."""
    for name in ("keys", "values"):
        stored = tensor(state[name], f"{where}, cache.{name}")
        if stored.dim() == 4 and stored.shape[1] == kv_heads:
            continue
        repeated = stored.dim() == 4 and stored.shape[1] == q_heads
        hint = (": K and V were repeated for the query heads; store kv_heads heads (the memory "
                "GQA saves) and let each group of query heads read its shared KV head")
        raise Fail(f"{where}, cache.{name} has shape {list(stored.shape)}, expected "
                   f"{kv_heads} heads ([B, Hkv, T, D]){hint if repeated else ''}")
