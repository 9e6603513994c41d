"""Comparing a candidate's outputs with the judge's reference, and saying where they part.

Tolerances come from measurement: `python -m graders.shared.tolerances` runs correct implementations of
several styles (the reference, the concat baseline, a float32-product attend, SDPA) over the
public cases' shapes and 51 seeds, and prints their error against the float64 reference. An
element passes when ``|got - expected| <= atol + rtol * |expected|``; NaN and inf never do.

    cache dtype     measured max abs error        tolerance (atol, rtol)   margin
    float32         6.4e-07 (3 float32 eps)       1e-5, 1e-4               34x
    float64         5.9e-07                       as float32               30x
    bfloat16        1.6e-02 (0.65 bf16 eps)       3e-2, 3e-2               6x
    float16         2.1e-03 (0.79 fp16 eps)       4e-3, 4e-3               5x
    logits ~1e3     7.2e-04 (float32)             5e-3, 1e-3               7x   (stable-softmax)
    logits ~2e4     1.3e-02 (bf16), 5.7e-3 (fp16) 5e-2, 5e-2               10x  (low-precision)

Why float64 shares float32's tolerance: the contract computes the softmax in float32 for every
cache dtype, so a float64 cache is exactly as precise as a float32 one. Why large logits need
more room: float32 scores of size L carry rounding of about L * 6e-8 before the softmax.
The mistakes the graders catch give NaN or errors of 1e-1 and more, far past every tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graders.shared.plans import Fail


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"{self.atol:.0e} + {self.rtol:.0e}*|expected|"


# Pinned from both sides by tests/test_tolerances.py: an output 1.1x the bound away fails, 0.9x
# passes, and the reference solution keeps the margin stated at each constant on the items' public
# cases (the table above: the worst over 51 seeds). A 2x loosening or tightening fails there.
TOLERANCE = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-4),  # prefix-equivalence, gqa: 80x
    torch.float64: Tolerance(atol=1e-5, rtol=1e-4),  # reset's float64 batch: 39x
    torch.bfloat16: Tolerance(atol=3e-2, rtol=3e-2),  # low-precision ordinary: 10x
    torch.float16: Tolerance(atol=4e-3, rtol=4e-3),  # low-precision ordinary: 10x
}
LARGE_LOGITS_FLOAT32 = Tolerance(atol=5e-3, rtol=1e-3)  # stable-softmax: 32x
LARGE_LOGITS_LOW_PRECISION = Tolerance(atol=5e-2, rtol=5e-2)  # bf16 11x, fp16 39x


def close(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """Elementwise: is `got` within `tol` of `expected` (NaN and inf never are)."""
    got, expected = got.double(), expected.double()
    return torch.isfinite(got) & ((got - expected).abs() <= tol.atol + tol.rtol * expected.abs())


# What `F.scaled_dot_product_attention(q, k, v, is_causal=True)` gives for one query over T
# keys: its causal mask is aligned to the top-left corner (query i sees keys 0..i), so the one
# query sees key 0 alone and returns its value (PyTorch issue #103082).
SDPA_IS_CAUSAL = (
    "the mask of attention (the output is the first key's value alone: "
    "scaled_dot_product_attention's is_causal with a single query masks from the "
    "top-left corner, PyTorch #103082)"
)

# Why an output is NaN or inf where the float64 reference is finite, unless the case says
# otherwise: with ordinary inputs, a slot attention should never have read. A slot past a row's
# length that is masked still gets weight exactly 0, and 0 * NaN = NaN, so a slot never written
# (torch.empty; the worker fills new memory with NaN) or holding stale NaN shows every time.
UNWRITTEN_SLOTS = (
    "uninitialized or stale cache slots likely reached attention (e.g. a row read "
    "past its length: a masked slot gets weight 0, and 0 * NaN = NaN)"
)


@dataclass(frozen=True)
class Divergence:
    """Where a sequence of outputs first leaves the reference. Output tensors are [B, H, T, D].

    `nonfinite` is "NaN" or "inf" when the first step that differs has an output element that is
    not finite where the reference is; the place (row, head, position) is then that element's.
    """

    step: int
    row: int
    head: int
    position: int
    max_abs: float
    max_rel: float
    nonfinite: str | None = None

    def error(self, tol: Tolerance | None = None) -> str:
        """How far off, in words: the largest errors (and `tol`, when given), or that the output
        is not finite (which no tolerance admits)."""
        if self.nonfinite:
            return f"non-finite output ({self.nonfinite}) where the float64 reference is finite"
        return (
            f"max abs error {self.max_abs:.2e}, max rel error {self.max_rel:.2e}"
            f"{'' if tol is None else f', tolerance {tol}'}"
        )

    def describe(
        self, step_name: str = "step", first_step: int = 0, cause: str = UNWRITTEN_SLOTS
    ) -> str:
        """The place and the error; for a non-finite output, also its likely `cause`."""
        where = (
            f"{step_name} {self.step + first_step}, row {self.row}, head {self.head}"
            f"{'' if self.position < 0 else f', position {self.position}'}"
        )
        if self.nonfinite:
            return f"{self.error()}, first at {where}: {cause}"
        return f"first differs at {where}: {self.error()}"


def first_divergence(
    got: list[torch.Tensor], expected: list[torch.Tensor], tol: Tolerance
) -> Divergence | None:
    """The first step whose output is not within `tol`, or None. Each step's tensors are
    [B, H, T, D] (T is 1 for a newest-token output, whose position is then reported as -1).
    Within that step, an element that is not finite where the reference is comes first."""
    for step, (g, e) in enumerate(zip(got, expected)):
        ok = close(g, e, tol)
        if ok.all():
            continue
        nonfinite = ~torch.isfinite(g) & torch.isfinite(e)  # [B, H, T, D]
        b, h, t, d = (int(i) for i in (nonfinite if nonfinite.any() else ~ok).nonzero()[0])
        diff = (g.double() - e.double()).abs().nan_to_num(float("inf"))
        rel = diff / e.double().abs().clamp_min(1e-12)
        what = None if not nonfinite.any() else "NaN" if g[b, h, t, d].isnan() else "inf"
        return Divergence(
            step, b, h, t if g.shape[2] > 1 else -1, float(diff.max()), float(rel.max()), what
        )
    return None


def require_close(
    got: list[torch.Tensor],
    expected: list[torch.Tensor],
    tol: Tolerance,
    *,
    case: str,
    step_name: str = "step",
    first_step: int = 0,
    likely: dict[str, list[torch.Tensor]] | None = None,
    nonfinite_cause: str = UNWRITTEN_SLOTS,
) -> None:
    """Fail with a diagnostic unless every step of `got` is within `tol` of `expected`.

    Steps are numbered from `first_step` in the message. An output that is NaN or inf where the
    reference is finite is said so, with `nonfinite_cause` (a case whose logits can overflow
    gives its own). `likely` maps a likely-mistake label to what a known mistake would output at
    every step; when the candidate's outputs match one, the label goes into the message.
    """
    divergence = first_divergence(got, expected, tol)
    if divergence is None:
        return
    if divergence.nonfinite:
        raise Fail(f"{case}: {divergence.describe(step_name, first_step, nonfinite_cause)}")
    message = f"{case}: {divergence.describe(step_name, first_step)} (tolerance {tol})"
    for label, mistaken in (likely or {}).items():
        if first_divergence(got, mistaken, tol) is None:
            message += f". Likely mistake: {label}"
            break
    raise Fail(message)


def require_shape(value: torch.Tensor, shape: tuple[int, ...], what: str, hint: str = "") -> None:
    if tuple(value.shape) != tuple(shape):
        raise Fail(f"{what} has shape {list(value.shape)}, expected {list(shape)}{hint}")
