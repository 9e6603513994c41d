"""Hidden gqa: more head layouts, batches of one, chunked appends.

The public item's attend cases all have B=2 and a 3-position prompt, so code with a special
path for MQA that squeezes away every size-1 dimension (`keys.squeeze()`, meaning the head)
passes it. Here, seeded, each case a prompt then chunks of 1 to 5 positions with an attend after
each append, every one compared with full attention over expanded heads (float64):
- GQA 4/2, 6/3, 8/2 and 16/2 (groups of 2, 2, 4 and 8), MQA 5/1, each with a random batch of
  1 to 3 rows and head_dim 4 to 16;
- MQA with a single row and a single first position: every squeezable dimension is 1.
After each case the cache must still hold kv_heads heads. A decode_step with a GQA layer of other
proportions (8 query heads on 2, B=1) must also keep kv_heads heads in the cache; its outputs
are not judged here (RoPE positions are rope-absolute's business).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, require_close
from graders.hidden import _cases

ITEM = "gqa"

TOL = TOLERANCE[torch.float32]
LAYOUTS = ((4, 2), (6, 3), (8, 2), (16, 2), (5, 1))  # (Hq, Hkv): groups of 2, 2, 4, 8; MQA
SINGLE_SEED, LAYER_SEED = _cases.BASE_SEED + 1310, _cases.BASE_SEED + 1320
LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM, LAYER_D_MODEL, LAYER_STEPS = 8, 2, 4, 24, 4


def grade(candidate: Candidate) -> str:
    for seed, (Hq, Hkv) in enumerate(LAYOUTS, start=_cases.BASE_SEED + 1300):
        g = cases.generator(seed)
        B, D = _cases.randint(g, 1, 3), _cases.choice(g, (4, 8, 16))
        _check(candidate, g, seed, B, Hq, Hkv, D, _cases.chunks(g, _cases.randint(g, 6, 15), 5))
    _check(candidate, cases.generator(SINGLE_SEED), SINGLE_SEED, 1, 4, 1, 8, [1, 1, 3])
    _check_layer(candidate)
    return (f"{len(LAYOUTS) + 1} seeded head layouts (group sizes 2 to 8, MQA, B=1, chunked) "
            f"within {TOL} of attention with expanded heads; caches keep kv_heads heads, through "
            "decode_step too")


def _check(candidate: Candidate, g, seed: int, B: int, Hq: int, Hkv: int, D: int, appends) -> None:
    kind = "MQA" if Hkv == 1 else f"GQA {Hq}/{Hkv}"
    case = _cases.name(seed, f"{kind}, B={B}, head_dim {D}, {sum(appends)} positions in "
                             f"{len(appends)} appends")
    seq = cases.sequence(g, B, Hq, Hkv, sum(appends), D)
    plan = Plan()
    plan.new("c")
    steps = _cases.attend_after_each_chunk(plan, seq, appends)
    total = steps[-1][1]
    state = plan.state("c")
    results = _cases.run(candidate, plan, case)

    got = _cases.outputs(results, steps, (B, Hq, 1, D), case)
    require_close(got, [_cases.newest(seq, end) for _, end in steps], TOL, case=case,
                  step_name="append", first_step=1)
    _require_kv_heads(results[state], (B, Hkv, total, D), f"{case}: at the end")


def _check_layer(candidate: Candidate) -> None:
    case = _cases.name(LAYER_SEED, f"decode_step with n_heads={LAYER_HEADS}, "
                                   f"n_kv_heads={LAYER_KV_HEADS}, B=1")
    g = cases.generator(LAYER_SEED)
    weights = cases.layer_weights(g, LAYER_D_MODEL, LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM)
    x = cases.randn(g, 1, LAYER_STEPS, LAYER_D_MODEL)
    plan = Plan()
    plan.layer("L", weights, LAYER_HEADS, LAYER_KV_HEADS, LAYER_HEAD_DIM, 10000.0)
    plan.new("c")
    for t in range(LAYER_STEPS):
        plan.decode_step("L", "c", x[:, t : t + 1])
    state = plan.state("c")
    results = _cases.run(candidate, plan, case)
    _require_kv_heads(results[state], (1, LAYER_KV_HEADS, LAYER_STEPS, LAYER_HEAD_DIM),
                      f"{case}: after {LAYER_STEPS} steps")


def _require_kv_heads(state: dict, shape: tuple[int, ...], where: str) -> None:
    for attr in ("keys", "values"):
        stored = tensor(state[attr], f"{where}, cache.{attr}")
        if tuple(stored.shape) != shape:
            raise Fail(f"{where}: cache.{attr} has shape {list(stored.shape)}, expected "
                       f"{list(shape)}: store kv_heads heads, never copies for the query heads")
