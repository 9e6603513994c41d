"""Hidden low-precision: large logits at a head_dim whose scale is not a power of two, and long
low-precision caches filled in chunks.

The public item's head_dim is 16: 1/sqrt(16) = 1/4 is exact in any floating dtype, so a
candidate who scales the query in its own dtype (`query * D ** -0.5` in bf16 or fp16, then
float32 scores) loses nothing there. At head_dim 32 the scale 0.1767... is inexact, and every
scaled query element is rounded again, by up to 2^-9 (bf16) or 2^-12 (fp16) of itself. So, per
dtype, seeded:
- large logits: q and k along one direction per head, every logit near +20000 and a few apart,
  as in the public item, but each key also reaching SIDEWAYS units out of that direction, at
  right angles to it (the logits stay near 20000): the rounding of a scaled query then moves
  each position's logit by a different amount, whole units, and the weights come out wrong
  (measured: 11x the tolerance in fp16, 43x in bf16). head_dim 32, 24 positions in chunks of
  1 to 4;
- ordinary inputs, head_dim 128, one row, 300 positions in chunks of up to 16.
Every append is followed by an attend; outputs must have the query's dtype and be within the
public item's tolerances of the float64 reference (from the same low-precision inputs), and the
cache must keep the dtype it was given. Measured, the correct implementations stay within 1/12
of those tolerances here.
"""

from __future__ import annotations

import math

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import LARGE_LOGITS_LOW_PRECISION, TOLERANCE, require_close
from graders.hidden import _cases

ITEM = "low-precision"

LOGIT, SPREAD, SIDEWAYS = 20000.0, 3.0, 200.0
CASES = [  # kind, B, H, T, D, largest chunk
    ("large logits", 2, 2, 24, 32, 4),
    ("ordinary", 1, 2, 300, 128, 16),
]
SEEDS = {torch.bfloat16: _cases.BASE_SEED + 1700, torch.float16: _cases.BASE_SEED + 1710}


def grade(candidate: Candidate) -> str:
    for dtype, seed in SEEDS.items():
        for i, case in enumerate(CASES):
            _check(candidate, seed + i, dtype, *case)
    return (f"bf16 and fp16: logits near {LOGIT:.0f} at head_dim 32, and 300 positions at head_dim "
            "128, appended in chunks: outputs in the query's dtype within the public tolerances, "
            "caches in their own dtype")


def _check(candidate: Candidate, seed: int, dtype: torch.dtype, kind: str, B: int, H: int, T: int,
           D: int, most: int) -> None:
    dname = str(dtype).removeprefix("torch.")
    case = _cases.name(seed, f"{dname} cache, {kind}, head_dim {D}, {T} positions in chunks")
    g = cases.generator(seed)
    appends = _cases.chunks(g, T, most)
    seq = (_large_logits(g, B, H, T, D) if kind == "large logits" else
           cases.sequence(g, B, H, H, T, D))
    seq = {part: x.to(dtype) for part, x in seq.items()}
    plan = Plan()
    plan.new("c")
    steps = _cases.attend_after_each_chunk(plan, seq, appends)
    state = plan.state("c")
    results = _cases.run(candidate, plan, case)

    for attr in ("keys", "values"):
        stored = tensor(results[state][attr], f"{case}: cache.{attr}")
        if stored.dtype != dtype:
            raise Fail(f"{case}: cache.{attr} is {str(stored.dtype).removeprefix('torch.')}: store "
                       "the dtype appended; upcast only inside attend")
    got = _cases.outputs(results, steps, (B, H, 1, D), case)
    for out, (_, end) in zip(got, steps):
        if out.dtype != dtype:
            raise Fail(f"{case}: attend's output at prefix length {end} is "
                       f"{str(out.dtype).removeprefix('torch.')}: return the query's dtype ({dname})")
    tol = LARGE_LOGITS_LOW_PRECISION if kind == "large logits" else TOLERANCE[dtype]
    try:
        require_close(got, [_cases.newest(seq, end) for _, end in steps], tol, case=case,
                      step_name="append", first_step=1)
    except Fail as exc:
        hint = (f". Only large logits go wrong: is anything (the scores, the scaled query) rounded "
                f"to {dname} before the float32 softmax?" if kind == "large logits" else "")
        raise Fail(f"{exc}{hint}") from None


def _large_logits(g: torch.Generator, B: int, H: int, T: int, D: int) -> dict[str, torch.Tensor]:
    """q and k [B, H, T, D] along one direction per head, every logit q.k / sqrt(D) near LOGIT
    give or take a few SPREADs, each key also SIDEWAYS out along its own direction at right
    angles to that one; v ordinary. float64."""
    direction = cases.randn(g, B, H, 1, D).double()
    direction = direction / direction.norm(dim=-1, keepdim=True)
    norm = math.sqrt(LOGIT * math.sqrt(D))
    jitter = SPREAD * math.sqrt(D) / norm
    q = norm * direction + jitter * cases.randn(g, B, H, T, D).double()
    side = cases.randn(g, B, H, T, D).double()
    side = side - (side * direction).sum(dim=-1, keepdim=True) * direction  # at right angles
    side = SIDEWAYS * side / side.norm(dim=-1, keepdim=True)
    k = norm * direction + side + jitter * cases.randn(g, B, H, T, D).double()
    return {"q": q, "k": k, "v": cases.randn(g, B, H, T, D).double()}
