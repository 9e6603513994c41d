"""low-precision: bf16 and fp16 caches keep their dtype, compute the softmax in float32, and return
outputs close to the reference in the query's dtype.

Per dtype, two caches decoded one token at a time, every prefix compared with graders.reference
(float64, from the same low-precision inputs, upcast exactly):
- ordinary inputs (B=2, H=4, T=12, D=16): outputs must have the query's dtype and the cache's
  keys and values the inputs' dtype (a cache upcast to float32 spends twice the memory the
  caller chose to save);
- large logits: q and k of norm ~280 along one direction per head, so every logit sits near
  +20000, a few apart (the weights mix). Unscaled scores q.k ~ 80000 overflow fp16 (largest
  65504): a softmax in fp16 gives inf/inf = NaN. Scaled before rounding, or in bf16 (whose
  exponent range is float32's), the scores are rounded to steps of 16 (fp16) or 128 (bf16), far
  coarser than the spread, and the weights come out wrong (measured error ~3). In float32 the
  scores keep ~1e-3 of precision.
A softmax computed in the cache's dtype is NOT detectable on ordinary inputs: measured, its error
stays within 2.2 eps (eps: bf16 7.8e-3, fp16 9.8e-4) where correct implementations reach 0.8
eps; only the large-logit case tells it apart, by 29x the tolerance or NaN.

The reference is graders.reference in float64; a float32-softmax reference differs from it by
5e-7, nothing beside the rounding of a low-precision output. Tolerances, measured by
`python -m graders.tolerances` (reference solution, concat baseline, a float32 product with the
values, scaled_dot_product_attention; the public seed and 50 more; worst error as a share of
the tolerance, i.e. 1 / margin):
    bf16  ordinary 3e-2 + 3e-2*|expected| (3.8 eps): worst 0.65 eps, share 0.17 (6x margin)
    fp16  ordinary 4e-3 + 4e-3*|expected| (4.1 eps): worst 0.79 eps, share 0.19 (5x margin)
    large logits, both 5e-2 + 5e-2*|expected|: worst share 0.095 (bf16), 0.084 (fp16): float32
          scores of ~80000 carry ~1e-2 of rounding before the 1/sqrt(D) scale (fp16: 4.3 eps).
"""

from __future__ import annotations

import math

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import LARGE_LOGITS_LOW_PRECISION as LARGE_LOGIT_TOLERANCE
from graders.compare import TOLERANCE, first_divergence, require_close, require_shape

ITEM = "low-precision"

B, H, T, D = 2, 4, 12, 16  # the ordinary case
LARGE_H, LARGE_T, LOGIT, SPREAD = 2, 8, 20000.0, 3.0  # the large-logit case
SEEDS = {torch.bfloat16: 600, torch.float16: 601}


def large_logits(g: torch.Generator, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """q [B, LARGE_H, LARGE_T, D] and k along one direction per head, of norms that put every
    logit q.k / sqrt(D) near LOGIT, give or take a few SPREADs; v ordinary. In `dtype`."""
    direction = cases.randn(g, B, LARGE_H, 1, D).double()
    direction = direction / direction.norm(dim=-1, keepdim=True)
    norm = math.sqrt(LOGIT * math.sqrt(D))
    jitter = SPREAD * math.sqrt(D) / norm  # moves each logit by about SPREAD
    q = norm * direction + jitter * cases.randn(g, B, LARGE_H, LARGE_T, D).double()
    k = norm * direction + jitter * cases.randn(g, B, LARGE_H, LARGE_T, D).double()
    v = cases.randn(g, B, LARGE_H, LARGE_T, D)
    return {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype)}


def case_inputs() -> dict[tuple[torch.dtype, str], dict[str, torch.Tensor]]:
    """The public cases, by (dtype, kind); graders.tolerances measures on the same."""
    inputs = {}
    for dtype, seed in SEEDS.items():
        g = cases.generator(seed)
        inputs[dtype, "ordinary"] = cases.sequence(g, B, H, H, T, D, dtype=dtype)
        inputs[dtype, "large logits"] = large_logits(g, dtype)
    return inputs


def grade(candidate: Candidate) -> str:
    inputs = case_inputs()
    plan = Plan()
    outputs, states = {}, {}
    for (dtype, kind), seq in inputs.items():
        name = f"{_name(dtype)} {kind}"
        plan.new(name)
        outputs[dtype, kind] = []
        for t in range(seq["k"].shape[2]):
            plan.append(name, seq["k"][:, :, t : t + 1], seq["v"][:, :, t : t + 1])
            outputs[dtype, kind].append(plan.attend(name, seq["q"][:, :, t : t + 1]))
        states[dtype, kind] = plan.state(name)
    results = candidate.run(plan)

    got = {}
    for (dtype, kind), indices in outputs.items():
        got[dtype, kind] = []
        for step, index in enumerate(indices):
            what = f"attend's output ({_name(dtype)} cache and query, {kind}, step {step})"
            out = tensor(results[index], what)
            require_shape(out, inputs[dtype, kind]["q"][:, :, :1].shape, what)
            if out.dtype != dtype:
                raise Fail(f"{what} is {_name(out.dtype)}: return the query's dtype "
                           f"({_name(dtype)}); compute the softmax in float32, then cast back")
            got[dtype, kind].append(out)
        for name in ("keys", "values"):
            stored = tensor(results[states[dtype, kind]][name], f"cache.{name} ({_name(dtype)})")
            if stored.dtype != dtype:
                raise Fail(f"cache.{name} of a {_name(dtype)} cache ({kind}) is "
                           f"{_name(stored.dtype)}: store the dtype appended (a low-precision "
                           "cache exists to halve memory); upcast only inside attend")

    for kind in ("ordinary", "large logits"):  # ordinary first: its failures are the plainer ones
        for dtype in SEEDS:
            seq = inputs[dtype, kind]
            full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # float64
            expected = [full[:, :, t : t + 1] for t in range(full.shape[2])]
            if kind == "ordinary":
                require_close(got[dtype, kind], expected, TOLERANCE[dtype],
                              case=f"{_name(dtype)} cache, {kind}")
                continue
            _require_finite(got[dtype, kind], _name(dtype))
            divergence = first_divergence(got[dtype, kind], expected, LARGE_LOGIT_TOLERANCE)
            if divergence:
                raise Fail(f"{_name(dtype)} cache, large logits: {divergence.describe()} "
                           f"(tolerance {LARGE_LOGIT_TOLERANCE}), while ordinary logits are right: "
                           f"are the scores rounded to {_name(dtype)} before the softmax? Compute "
                           "q.k, the scale and the softmax in float32")
    return (f"bf16 and fp16 caches keep their dtype and answer in the query's; every prefix within "
            f"{TOLERANCE[torch.bfloat16]} (bf16), {TOLERANCE[torch.float16]} (fp16) of the float64 "
            f"reference, and finite within {LARGE_LOGIT_TOLERANCE} with logits near {LOGIT:.0f}")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _require_finite(outputs: list[torch.Tensor], dname: str) -> None:
    for step, out in enumerate(outputs):
        if not torch.isfinite(out).all():
            raise Fail(f"{dname} cache, large logits: outputs are not finite at step {step}. The "
                       f"logits are near {LOGIT:.0f}: q.k (near {LOGIT * math.sqrt(D):.0f}) "
                       "overflows fp16, whose largest value is 65504, and exp overflows unless "
                       "each row's maximum is subtracted first: compute scores and softmax in "
                       "float32, stably")
