"""gqa: grouped-query and multi-query attention equal full attention with expanded heads, and the
cache stores kv_heads heads.

Query head h reads KV head h // G, G = Hq // Hkv (contiguous groups, as in Llama). The judge's
reference expands K and V with `repeat_interleave`; the cache must not: GQA exists to store Hkv
heads instead of Hq. Every case is decoded in chunks (graders.dense.decode_loop), every prefix
compared; when the outputs match the other common mapping, h % Hkv (`repeat` instead of
`repeat_interleave`, or a reshape to [B, G, Hkv, D]), the message names it. After each case the
cache must hold kv_heads heads.

Public, a 3-position prompt then single tokens:
- Hq/Hkv = 6/2 and 12/4: groups of 3, a group size different from the KV head count, so the
  two mappings differ for most heads;
- MQA (Hkv = 1) and MHA (Hkv = Hq), where both mappings agree: a grouped attend must still
  handle the edge cases (a broadcast over 4 query heads, a group of one);
- decode_step with a GQA layer (n_heads=6, n_kv_heads=2): outputs equal a full forward at every
  step and the cache holds 2 heads (a decode_step that repeats k and v for the query heads before
  appending gives right outputs from a cache 3x too big). When the outputs differ, an MHA layer
  is decoded too: if it differs as well, the fault is not in the heads (RoPE positions are
  rope-absolute's business) and only the GQA cache's heads are judged here. attend is judged
  before decode_step is called, so a stub decode_step hides no attend mistake.

Hidden, seeded, a prompt then chunks of 1 to 5 positions; the public attend cases all
have B=2 and a 3-position prompt, so code with a special path for MQA that squeezes away every
size-1 dimension (`keys.squeeze()`, meaning the head) passes them:
- GQA 4/2, 6/3, 8/2 and 16/2 (groups of 2, 2, 4 and 8), MQA 5/1, each with a random batch of
  1 to 3 rows and head_dim 4 to 16;
- MQA with a single row and a single first position: every squeezable dimension is 1.
The cache's keys and values must then be exactly [B, Hkv, T, D]. A decode_step with a GQA layer
of other proportions (8 query heads on 2, B=1) must also keep exactly that in the cache; its
outputs are not judged here (RoPE positions are rope-absolute's business).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import TOLERANCE, first_divergence, require_close, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "gqa"

PUBLIC = [  # name, Hq, Hkv, seed
    ("GQA 6/2 (groups of 3 over 2 KV heads)", 6, 2, 700),
    ("GQA 12/4 (groups of 3 over 4 KV heads)", 12, 4, 701),
    ("MQA 4/1", 4, 1, 702),
    ("MHA 4/4", 4, 4, 703),
]
B, T, D, PROMPT = 2, 7, 8, 3
LAYERS = {"GQA": (6, 2), "MHA": (2, 2)}  # decode_step: n_heads, n_kv_heads
D_MODEL, STEPS, BASE = 32, 5, 10000.0
TOL = TOLERANCE[torch.float32]
MAPPING = (
    "the GQA head mapping: which KV head each query head reads (the outputs match "
    "query head h reading KV head h % Hkv)"
)

HIDDEN_LAYOUTS = ((4, 2), (6, 3), (8, 2), (16, 2), (5, 1))  # (Hq, Hkv): groups of 2, 2, 4, 8; MQA
SINGLE_SEED, LAYER_SEED = 1310, 1320
LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM, LAYER_D_MODEL, LAYER_STEPS = 8, 2, 4, 24, 4


@dataclass(frozen=True)
class Case:
    """q [B, Hq, T, D], k and v [B, Hkv, T, D], appended in chunks of `appends` positions (the
    cache then holds [B, Hkv, T, D])."""

    name: str
    seq: dict[str, torch.Tensor]
    appends: tuple[int, ...]

    @property
    def heads(self) -> tuple[int, int]:
        return self.seq["q"].shape[1], self.seq["k"].shape[1]


def grade(candidate: Candidate) -> str:
    _check_attend(candidate, _public_cases())
    heads, kv_heads = LAYERS["GQA"]
    where = f"decode_step with n_heads={heads}, n_kv_heads={kv_heads}"
    divergence = _decode(candidate, "GQA", where)
    layouts = (
        f"{len(PUBLIC)} head layouts (GQA 6/2 and 12/4, MQA, MHA) within {TOL} of full "
        "attention with expanded heads at every prefix; caches keep kv_heads heads"
    )
    if divergence is None:
        return f"{layouts}; {where} equals a full forward"
    if _decode(candidate, "MHA", "decode_step with an MHA layer"):
        return (
            f"{layouts}. decode_step's outputs are wrong for an MHA layer too, so they are not "
            "judged here (see rope-absolute)"
        )
    raise Fail(
        f"{where}: {divergence}, while an MHA layer decodes right: does decode_step split "
        "k and v into n_kv_heads heads and let query head h read KV head "
        "h // (n_heads // n_kv_heads), as attend does?"
    )


def grade_hidden(candidate: Candidate) -> str:
    for case in _hidden_cases():
        with hidden_cases.labelled(case.name):
            state = _check_attend(candidate, [case])[case.name]
        _require_storage(state, tuple(case.seq["k"].shape), f"{case.name}: at the end")
    _check_hidden_layer(candidate)
    return (
        f"{len(HIDDEN_LAYOUTS) + 1} seeded head layouts (group sizes 2 to 8, MQA, B=1, "
        f"chunked) within {TOL} of attention with expanded heads; caches keep kv_heads "
        "heads, through decode_step too"
    )


def _public_cases() -> list[Case]:
    return [
        Case(
            name,
            cases.sequence(cases.generator(seed), B, Hq, Hkv, T, D),
            (PROMPT,) + (1,) * (T - PROMPT),
        )
        for name, Hq, Hkv, seed in PUBLIC
    ]


def _hidden_cases() -> list[Case]:
    """Each hidden layout with a random batch, head_dim and chunks; MQA with B=1."""
    found = []
    for seed, (Hq, Hkv) in enumerate(HIDDEN_LAYOUTS, start=hidden_cases.seed(1300)):
        g = cases.generator(seed)
        b, d = cases.randint(g, 1, 3), cases.choice(g, (4, 8, 16))
        found.append(
            _hidden_case(g, seed, b, Hq, Hkv, d, cases.chunks(g, cases.randint(g, 6, 15), 5))
        )
    seed = hidden_cases.seed(SINGLE_SEED)
    found.append(_hidden_case(cases.generator(seed), seed, 1, 4, 1, 8, [1, 1, 3]))
    return found


def _hidden_case(g, seed: int, b: int, Hq: int, Hkv: int, d: int, appends: list[int]) -> Case:
    name = hidden_cases.name(
        seed,
        f"{hidden_cases.layout(Hq, Hkv)}, B={b}, head_dim {d}, "
        f"{sum(appends)} positions in {len(appends)} appends",
    )
    return Case(name, cases.sequence(g, b, Hq, Hkv, sum(appends), d), tuple(appends))


def _check_attend(candidate: Candidate, batch: list[Case]) -> dict[str, dict]:
    """Decode every case of `batch` in one plan; Fail unless every prefix equals attention with
    expanded heads and each cache holds kv_heads heads. Returns each case's final state."""
    plan = Plan()
    steps, states = {}, {}
    for case in batch:
        plan.new(case.name)
        steps[case.name] = decode_loop.append_and_attend(plan, case.seq, case.appends, case.name)
        states[case.name] = plan.state(case.name)
    results = candidate.run(plan)

    for case in batch:
        seq, (Hq, Hkv) = case.seq, case.heads
        b, _, _, d = seq["q"].shape
        got = decode_loop.outputs(
            results,
            steps[case.name],
            (b, Hq, 1, d),
            lambda n, _: f"{case.name}: attend's output at step {n}",
        )
        group = Hq // Hkv
        modulo = {
            "q": seq["q"],
            "k": seq["k"].repeat(1, group, 1, 1),
            "v": seq["v"].repeat(1, group, 1, 1),
        }  # head h reads h % Hkv
        require_close(
            got,
            decode_loop.expected(seq, steps[case.name]),
            TOL,
            case=case.name,
            likely={MAPPING: decode_loop.expected(modulo, steps[case.name])},
            **decode_loop.numbering(case.appends),
        )
        _require_kv_heads(
            results[states[case.name]], Hkv, Hq, f"{case.name}: after {sum(case.appends)} positions"
        )
    return {name: results[index] for name, index in states.items()}


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
    return (
        None
        if divergence is None
        else (
            f"output first differs from a full forward at step {divergence.step}, row "
            f"{divergence.row}: max abs error {divergence.max_abs:.2e} (tolerance {TOL})"
        )
    )


def _check_hidden_layer(candidate: Candidate) -> None:
    """decode_step with a GQA layer of 8 query heads on 2, B=1: the cache holds exactly
    [1, 2, steps, head_dim]."""
    seed = hidden_cases.seed(LAYER_SEED)
    case = hidden_cases.name(
        seed, f"decode_step with n_heads={LAYER_HEADS}, n_kv_heads={LAYER_KV_HEADS}, B=1"
    )
    g = cases.generator(seed)
    weights = cases.layer_weights(g, LAYER_D_MODEL, LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM)
    x = cases.randn(g, 1, LAYER_STEPS, LAYER_D_MODEL)
    plan = Plan()
    plan.layer("L", weights, LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM, 10000.0)
    plan.new("c")
    for t in range(LAYER_STEPS):
        plan.decode_step("L", "c", x[:, t : t + 1])
    state = plan.state("c")
    results = hidden_cases.run(candidate, plan, case)
    _require_storage(
        results[state],
        (1, LAYER_KV_HEADS, LAYER_STEPS, LAYER_HEAD_DIM),
        f"{case}: after {LAYER_STEPS} steps",
    )


def _require_kv_heads(state: dict, kv_heads: int, q_heads: int, where: str) -> None:
    """cache.keys and values hold kv_heads heads (their other sizes are other items' business)."""
    for name in ("keys", "values"):
        stored = tensor(state[name], f"{where}, cache.{name}")
        if stored.dim() == 4 and stored.shape[1] == kv_heads:
            continue
        repeated = stored.dim() == 4 and stored.shape[1] == q_heads
        hint = (
            ": K and V were repeated for the query heads; store kv_heads heads (the memory "
            "GQA saves) and let each group of query heads read its shared KV head"
        )
        raise Fail(
            f"{where}, cache.{name} has shape {list(stored.shape)}, expected "
            f"{kv_heads} heads ([B, Hkv, T, D]){hint if repeated else ''}"
        )


def _require_storage(state: dict, shape: tuple[int, ...], where: str) -> None:
    """The hidden cases' stricter check: cache.keys and values exactly `shape`."""
    for attr in ("keys", "values"):
        stored = tensor(state[attr], f"{where}, cache.{attr}")
        if tuple(stored.shape) != shape:
            raise Fail(
                f"{where}: cache.{attr} has shape {list(stored.shape)}, expected "
                f"{list(shape)}: store kv_heads heads, never copies for the query heads"
            )
