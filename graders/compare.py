"""Comparing a candidate's outputs with the judge's reference, and saying where they part.

Tolerances come from measurement (`python -m graders.tolerances` prints them again): the error of
correct implementations of several styles against the float64 reference, over the public cases,
times a margin. A tolerance is ``|got - expected| <= atol + rtol * |expected|`` elementwise, with
NaN or inf never close.

    dtype      measured max abs error      atol     rtol    why this margin
    float32    2.4e-07 (outputs of O(1))   1e-05    1e-04   40x the worst seen; no bug is that small
    float64    4.4e-16                     1e-10    1e-08   same margin idea, for float64 caches
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graders.candidate import Fail


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def __str__(self) -> str:
        return f"{self.atol:.0e} + {self.rtol:.0e}*|expected|"


TOLERANCE = {
    torch.float32: Tolerance(atol=1e-5, rtol=1e-4),
    torch.float64: Tolerance(atol=1e-10, rtol=1e-8),
}


def close(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> torch.Tensor:
    """Elementwise: is `got` within `tol` of `expected` (NaN and inf never are)."""
    got, expected = got.double(), expected.double()
    return torch.isfinite(got) & ((got - expected).abs() <= tol.atol + tol.rtol * expected.abs())


@dataclass(frozen=True)
class Divergence:
    """Where a sequence of outputs first leaves the reference. Output tensors are [B, H, T, D]."""

    step: int
    row: int
    head: int
    position: int
    max_abs: float
    max_rel: float

    def describe(self, step_name: str = "step", first_step: int = 0) -> str:
        return (f"first differs at {step_name} {self.step + first_step}, row {self.row}, head {self.head}"
                f"{'' if self.position < 0 else f', position {self.position}'}: "
                f"max abs error {self.max_abs:.2e}, max rel error {self.max_rel:.2e}")


def first_divergence(got: list[torch.Tensor], expected: list[torch.Tensor],
                     tol: Tolerance) -> Divergence | None:
    """The first step whose output is not within `tol`, or None. Each step's tensors are
    [B, H, T, D] (T is 1 for a newest-token output, whose position is then reported as -1)."""
    for step, (g, e) in enumerate(zip(got, expected)):
        ok = close(g, e, tol)
        if ok.all():
            continue
        b, h, t, _ = (int(i) for i in (~ok).nonzero()[0])
        diff = (g.double() - e.double()).abs().nan_to_num(float("inf"))
        rel = diff / e.double().abs().clamp_min(1e-12)
        return Divergence(step, b, h, t if g.shape[2] > 1 else -1,
                          float(diff.max()), float(rel.max()))
    return None


def require_close(got: list[torch.Tensor], expected: list[torch.Tensor], tol: Tolerance, *,
                  case: str, step_name: str = "step", first_step: int = 0,
                  likely: dict[str, list[torch.Tensor]] | None = None) -> None:
    """Fail with a diagnostic unless every step of `got` is within `tol` of `expected`.

    Steps are numbered from `first_step` in the message. `likely` maps a likely-mistake label to what a known mistake would output at every step; when
    the candidate's outputs match one, the label goes into the message.
    """
    divergence = first_divergence(got, expected, tol)
    if divergence is None:
        return
    message = f"{case}: {divergence.describe(step_name, first_step)} (tolerance {tol})"
    for label, mistaken in (likely or {}).items():
        if first_divergence(got, mistaken, tol) is None:
            message += f". Likely mistake: {label}"
            break
    raise Fail(message)


def require_shape(value: torch.Tensor, shape: tuple[int, ...], what: str, hint: str = "") -> None:
    if tuple(value.shape) != tuple(shape):
        raise Fail(f"{what} has shape {list(value.shape)}, expected {list(shape)}{hint}")
