"""How hidden cases are seeded and named.

Every hidden case is generated from its seed alone (`BASE_SEED` plus an offset per item and
case): its shapes, chunk sizes, schedules and tensors. A failure names the seed and says what
kind of case it was (`name`); it never prints an input tensor, so a candidate learns which
concern failed, not the case itself. To replay one, rebuild the case from its seed in the item's
file (its `hidden_cases` or `grade_hidden`).
"""

from __future__ import annotations

from contextlib import contextmanager

from graders.candidate import Candidate, CandidateError, CandidateTimeout, Fail, Plan, Results

BASE_SEED = 7000


def name(seed: int, what: str) -> str:
    """How a hidden case names itself in messages (grade.py puts "hidden case: " in front)."""
    return f"seed {seed} ({what})"


def shape(B: int, H: int, D: int | None = None, heads: str = "head") -> str:
    """A case's shape in words: "B=2, 1 kv head, head_dim 8"."""
    words = f"B={B}, {H} {heads}{'s' if H != 1 else ''}"
    return words if D is None else f"{words}, head_dim {D}"


def layout(Hq: int, Hkv: int) -> str:
    """A head layout in words: "MHA", "MQA" or "GQA 8/2"."""
    return "MHA" if Hq == Hkv else "MQA" if Hkv == 1 else f"GQA {Hq}/{Hkv}"


def run(candidate: Candidate, plan: Plan, case: str) -> Results:
    """`candidate.run(plan)`, with `case` in front of what a crash, hang or unexpected exception
    says."""
    with labelled(case):
        return candidate.run(plan)


@contextmanager
def labelled(case: str):
    """Name `case` in every verdict raised inside: a CandidateError or CandidateTimeout gets it
    in front, and so does a Fail that does not name it already (a check shared with the public
    cases words some of its messages without a case name)."""
    try:
        yield
    except CandidateTimeout as exc:
        raise CandidateTimeout(f"{case}: {exc}") from None
    except CandidateError as exc:
        raise CandidateError(f"{case}: {exc}") from None
    except Fail as exc:
        if case in str(exc):
            raise
        raise Fail(f"{case}: {exc}") from None
