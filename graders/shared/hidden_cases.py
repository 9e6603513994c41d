"""How hidden cases are seeded and named.

Every hidden case is generated from its seed alone: its shapes, chunk sizes, schedules and
tensors. A case's seed is the run's seed (drawn afresh for each `--hidden` run, recorded in the
report, replayed with `--seed N`) plus the case's own offset: an item's `*_SEED`, `*_SEEDS` and
`HIDDEN_CASES` constants hold offsets, and `seed`, `seeds` and `seeded` add the run's seed while
a grade runs (`run_seed`). So a case nobody has read in the source is drawn at every run, and
a correct implementation passes for every seed. A failure names the case's seed and says what
kind of case it was (`name`); it never prints an input tensor, so a candidate learns which
concern failed, not the case itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


from graders.shared.plans import CandidateError, CandidateTimeout, Fail, Plan, PlanRunner, Results

_RUN_SEED: ContextVar[int] = ContextVar("hidden_run_seed")


@contextmanager
def run_seed(seed: int) -> Iterator[None]:
    """Draw the hidden cases of the grade run inside from `seed`."""
    token = _RUN_SEED.set(seed)
    try:
        yield
    finally:
        _RUN_SEED.reset(token)


def seed(offset: int) -> int:
    """The seed of the case at `offset` in this run (LookupError outside `run_seed`)."""
    return _RUN_SEED.get() + offset


def seeds(offsets: Iterable[int]) -> list[int]:
    """`seed` of each offset."""
    return [seed(offset) for offset in offsets]


def seeded(cases: Iterable[tuple]) -> list[tuple]:
    """Case tuples whose first field is an offset, with that field made the case's seed."""
    return [(seed(offset), *rest) for offset, *rest in cases]


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


def run(candidate: PlanRunner, plan: Plan, case: str) -> Results:
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
        raise CandidateError(f"{case}: {exc}", exc.signature) from None
    except Fail as exc:
        if case in str(exc):
            raise
        raise Fail(f"{case}: {exc}") from None
