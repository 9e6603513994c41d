"""low-precision: bf16 and fp16 caches keep their dtype, compute the scores (q.k and the scale) and
the softmax in float32, and return outputs close to the reference in the query's dtype.

Public: per dtype, two caches decoded one token at a time, every prefix compared with graders.shared.reference
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

The reference is graders.shared.reference in float64; a float32-softmax reference differs from it by
5e-7, nothing beside the rounding of a low-precision output. Tolerances, measured by
`python -m graders.shared.tolerances` (reference solution, concat baseline, a float32 product with the
values, scaled_dot_product_attention; the public seed and 50 more; worst error as a share of
the tolerance, i.e. 1 / margin):
    bf16  ordinary 3e-2 + 3e-2*|expected| (3.8 eps): worst 0.65 eps, share 0.17 (6x margin)
    fp16  ordinary 4e-3 + 4e-3*|expected| (4.1 eps): worst 0.79 eps, share 0.19 (5x margin)
    large logits, both 5e-2 + 5e-2*|expected|: worst share 0.095 (bf16), 0.084 (fp16): float32
          scores of ~80000 carry ~1e-2 of rounding before the 1/sqrt(D) scale (fp16: 4.3 eps).

Hidden: the public head_dim is 16: 1/sqrt(16) = 1/4 is exact in any floating dtype, so a
candidate who scales the query in its own dtype (`query * D ** -0.5` in bf16 or fp16, then
float32 scores) loses nothing there. At head_dim 32 the scale 0.1767... is inexact, and every
scaled query element is rounded again, by up to 2^-9 (bf16) or 2^-12 (fp16) of itself. So, per
dtype, seeded:
- large logits: q and k along one direction per head, every logit near +20000 and a few apart,
  as in the public cases, but each key also reaching SIDEWAYS units out of that direction, at
  right angles to it (the logits stay near 20000): the rounding of a scaled query then moves
  each position's logit by a different amount, whole units, and the weights come out wrong
  (measured: 11x the tolerance in fp16, 43x in bf16). head_dim 32, 24 positions in chunks of
  1 to 4;
- ordinary inputs, head_dim 128, one row, 300 positions in chunks of up to 16.
Every append is followed by an attend (graders.dense.decode_loop); outputs must have the query's dtype
and be within the public tolerances of the float64 reference (from the same low-precision
inputs), and the cache must keep the dtype it was given. Measured, the correct implementations
stay within 1/12 of those tolerances here.
"""

from __future__ import annotations

import math

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import LARGE_LOGITS_LOW_PRECISION as LARGE_LOGIT_TOLERANCE
from graders.shared.compare import TOLERANCE, first_divergence, require_close, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "low-precision"

B, H, T, D = 2, 4, 12, 16  # the ordinary case
LARGE_H, LARGE_T, LOGIT, SPREAD = 2, 8, 20000.0, 3.0  # the large-logit case
SEEDS = {torch.bfloat16: 600, torch.float16: 601}

SIDEWAYS = 200.0  # how far the hidden large-logit keys reach out of their shared direction
HIDDEN_CASES = [  # kind, B, H, T, D, largest chunk
    ("large logits", 2, 2, 24, 32, 4),
    ("ordinary", 1, 2, 300, 128, 16),
]
HIDDEN_SEEDS = {torch.bfloat16: 1700, torch.float16: 1710}


def grade(candidate: Candidate) -> str:
    inputs = _case_inputs()
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
                raise Fail(
                    f"{what} is {_name(out.dtype)}: return the query's dtype "
                    f"({_name(dtype)}); compute the scores (q.k and the scale) and the "
                    "softmax in float32, then cast back"
                )
            got[dtype, kind].append(out)
        for name in ("keys", "values"):
            stored = tensor(results[states[dtype, kind]][name], f"cache.{name} ({_name(dtype)})")
            if stored.dtype != dtype:
                raise Fail(
                    f"cache.{name} of a {_name(dtype)} cache ({kind}) is "
                    f"{_name(stored.dtype)}: store the dtype appended (a low-precision "
                    "cache exists to halve memory); upcast only inside attend"
                )

    for kind in ("ordinary", "large logits"):  # ordinary first: its failures are the plainer ones
        for dtype in SEEDS:
            seq = inputs[dtype, kind]
            full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # float64
            expected = [full[:, :, t : t + 1] for t in range(full.shape[2])]
            if kind == "ordinary":
                require_close(
                    got[dtype, kind],
                    expected,
                    TOLERANCE[dtype],
                    case=f"{_name(dtype)} cache, {kind}",
                )
                continue
            _require_finite(got[dtype, kind], _name(dtype))
            divergence = first_divergence(got[dtype, kind], expected, LARGE_LOGIT_TOLERANCE)
            if divergence:
                raise Fail(
                    f"{_name(dtype)} cache, large logits: {divergence.describe()} "
                    f"(tolerance {LARGE_LOGIT_TOLERANCE}), while ordinary logits are right: "
                    f"are the scores rounded to {_name(dtype)} before the softmax? Compute "
                    "q.k, the scale and the softmax in float32"
                )
    return (
        f"bf16 and fp16 caches keep their dtype and answer in the query's; every prefix within "
        f"{TOLERANCE[torch.bfloat16]} (bf16), {TOLERANCE[torch.float16]} (fp16) of the float64 "
        f"reference, and finite within {LARGE_LOGIT_TOLERANCE} with logits near {LOGIT:.0f}"
    )


def grade_hidden(candidate: Candidate) -> str:
    for dtype, seed in HIDDEN_SEEDS.items():
        for i, case in enumerate(HIDDEN_CASES):
            _check_hidden(candidate, hidden_cases.seed(seed + i), dtype, *case)
    return (
        f"bf16 and fp16: logits near {LOGIT:.0f} at head_dim 32, and 300 positions at head_dim "
        "128, appended in chunks: outputs in the query's dtype within the public tolerances, "
        "caches in their own dtype"
    )


def _case_inputs() -> dict[tuple[torch.dtype, str], dict[str, torch.Tensor]]:
    """The public cases, by (dtype, kind). graders.shared.tolerances measures on the same inputs."""
    inputs = {}
    for dtype, seed in SEEDS.items():
        g = cases.generator(seed)
        inputs[dtype, "ordinary"] = cases.sequence(g, B, H, H, T, D, dtype=dtype)
        inputs[dtype, "large logits"] = cases.large_logits(
            g, B, LARGE_H, LARGE_T, D, LOGIT, SPREAD, dtype
        )
    return inputs


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _require_finite(outputs: list[torch.Tensor], dname: str) -> None:
    for step, out in enumerate(outputs):
        if not torch.isfinite(out).all():
            raise Fail(
                f"{dname} cache, large logits: outputs are not finite at step {step}. The "
                f"logits are near {LOGIT:.0f}: q.k (near {LOGIT * math.sqrt(D):.0f}) "
                "overflows fp16, whose largest value is 65504, and exp overflows unless "
                "each row's maximum is subtracted first: compute scores and softmax in "
                "float32, stably"
            )


def _check_hidden(
    candidate: Candidate,
    seed: int,
    dtype: torch.dtype,
    kind: str,
    B: int,
    H: int,
    T: int,
    D: int,
    most: int,
) -> None:
    """One hidden case decoded in chunks of up to `most`: the cache's dtype, the outputs' dtype,
    and every output within the public tolerance of `kind`."""
    dname = _name(dtype)
    case = hidden_cases.name(seed, f"{dname} cache, {kind}, head_dim {D}, {T} positions in chunks")
    g = cases.generator(seed)
    appends = cases.chunks(g, T, most)
    seq = (
        cases.large_logits(g, B, H, T, D, LOGIT, SPREAD, dtype, sideways=SIDEWAYS)
        if kind == "large logits"
        else {part: x.to(dtype) for part, x in cases.sequence(g, B, H, H, T, D).items()}
    )
    plan = Plan()
    plan.new("c")
    steps = decode_loop.append_and_attend(plan, seq, appends)
    state = plan.state("c")
    results = hidden_cases.run(candidate, plan, case)

    for attr in ("keys", "values"):
        stored = tensor(results[state][attr], f"{case}: cache.{attr}")
        if stored.dtype != dtype:
            raise Fail(
                f"{case}: cache.{attr} is {_name(stored.dtype)}: store the dtype appended; "
                "upcast only inside attend"
            )
    got = decode_loop.outputs(
        results,
        steps,
        (B, H, 1, D),
        lambda n, step: f"{case}: attend's output at prefix length {step.end}",
    )
    for out, step in zip(got, steps):
        if out.dtype != dtype:
            raise Fail(
                f"{case}: attend's output at prefix length {step.end} is "
                f"{_name(out.dtype)}: return the query's dtype ({dname})"
            )
    tol = LARGE_LOGIT_TOLERANCE if kind == "large logits" else TOLERANCE[dtype]
    overflow = (
        {
            "nonfinite_cause": f"did q.k, the scale or the softmax overflow in {dname}? "
            "Compute them in float32, stably"
        }
        if kind == "large logits"
        else {}
    )
    try:
        require_close(
            got,
            decode_loop.expected(seq, steps),
            tol,
            case=case,
            step_name="append",
            first_step=1,
            **overflow,
        )
    except Fail as exc:
        hint = (
            f". Only large logits go wrong: is anything (the scores, the scaled query) rounded "
            f"to {dname} before the float32 softmax?"
            if kind == "large logits"
            else ""
        )
        raise Fail(f"{exc}{hint}") from None
