"""stable-softmax: large logits give finite, correct outputs.

float32 exp overflows to inf past 88 and underflows to 0 below about -103, so a softmax computed
as exp(s) / sum(exp(s)) gives inf/inf or 0/0 = NaN on logits in the thousands; subtracting each
row's maximum first changes nothing mathematically and keeps every exp in range. Two cases, one
position appended per step and every prefix compared with the float64 reference:
- random keys and queries of large norm: logits of both signs in the thousands, nearly one-hot
  weights (overflow without the max subtraction);
- every logit large and negative, near -1000 in row 0 and -3000 in row 1, a few apart so the
  weights mix (underflow to 0/0 without it; the rows' different ranges also catch a maximum
  taken over the whole batch instead of per row).
"""

from __future__ import annotations

import math

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import Tolerance, require_close, require_shape

ITEM = "stable-softmax"

B, H, D, T = 2, 2, 16, 8
NEGATIVE_OFFSETS = (-1000.0, -3000.0)  # where row b's logits sit in the negative case
SPREAD = 3.0  # their spread around that offset

# float32 logits of size L carry rounding errors of about L * 6e-8, so where the weights are not
# one-hot, outputs may differ from the float64 reference by ~1e-4 at L = 1000 and more at 3000,
# past TOLERANCE[float32] (1e-5 + 1e-4*|expected|). Measured max abs error of correct styles (the
# reference, the concat baseline, a manual max-subtracted softmax, scaled_dot_product_attention,
# pre-scaled queries, einsum, logsumexp): 3.0e-4 on these cases (1.5e-4 for the reference), 7.0e-4
# the worst over 30 other seeds, with negative or positive offsets. Margin: 7x that worst, 17x
# these cases; the mistakes this item catches give NaN or errors of 1e-2 and more.
STABLE_TOLERANCE = Tolerance(atol=5e-3, rtol=1e-3)


def grade(candidate: Candidate) -> str:
    g = cases.generator(300)
    case_inputs = {
        "random keys and queries of large norm (logits in the thousands)":
            cases.sequence(g, B, H, H, T, D, scale=40.0),
        "every logit large and negative": _negative(g),
    }
    plan = Plan()
    outputs = {}
    for name, seq in case_inputs.items():
        plan.new(name)
        outputs[name] = []
        for t in range(T):
            plan.append(name, seq["k"][:, :, t : t + 1], seq["v"][:, :, t : t + 1])
            outputs[name].append(plan.attend(name, seq["q"][:, :, t : t + 1]))
    results = candidate.run(plan)

    for name, seq in case_inputs.items():
        got = [tensor(results[i], f"attend's output ({name}, step {s})")
               for s, i in enumerate(outputs[name])]
        for step, out in enumerate(got):
            require_shape(out, (B, H, 1, D), f"attend's output ({name}, step {step})")
            _require_finite(out, seq, step, name)
        full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, T, D]
        require_close(got, [full[:, :, t : t + 1] for t in range(T)], STABLE_TOLERANCE,
                      case=name, step_name="step")
    return (f"{len(case_inputs)} cases with logits in the thousands: every prefix finite and "
            f"within {STABLE_TOLERANCE} of the float64 reference")


def _negative(g: torch.Generator) -> dict[str, torch.Tensor]:
    """Queries along one direction per head and keys against it: every logit of row b is near
    NEGATIVE_OFFSETS[b], give or take a few SPREADs."""
    direction = cases.randn(g, B, H, 1, D).double()
    direction = direction / direction.norm(dim=-1, keepdim=True)
    norm = (-torch.tensor(NEGATIVE_OFFSETS, dtype=torch.float64) * math.sqrt(D)).sqrt()
    norm = norm[:, None, None, None]  # q.k / sqrt(D) = -norm^2 / sqrt(D) = the offset
    jitter = SPREAD * math.sqrt(D) / norm  # moves each logit by about SPREAD
    q = norm * direction + jitter * cases.randn(g, B, H, T, D).double()
    k = -norm * direction + jitter * cases.randn(g, B, H, T, D).double()
    return {"q": q.float(), "k": k.float(), "v": cases.randn(g, B, H, T, D)}


def _require_finite(out: torch.Tensor, seq: dict, step: int, name: str) -> None:
    bad_rows = (~torch.isfinite(out)).flatten(1).any(dim=1).nonzero()
    if not len(bad_rows):
        return
    row = int(bad_rows[0])
    q, k = seq["q"][row, :, step].double(), seq["k"][row, :, : step + 1].double()  # [H, D], [H, t, D]
    logit = float((k @ q[:, :, None]).max()) / math.sqrt(D)
    why = ("overflow" if logit > 0 else
           "underflow (every exp is 0 in float32, then 0/0)")
    raise Fail(f"{name}: outputs are not finite for logits around {logit:.0f} (step {step}, "
               f"row {row}): did the softmax {why}?")
