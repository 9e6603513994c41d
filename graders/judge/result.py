"""What a grade found: each item's outcome, each tell's, and the grade built from them, with the
level rule (`level`), which the interview applies to the items a save grades too.

Needs no torch: the formats, the record of --lf and the interview read results without the judge.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from graders.shared import rubric as rubric_data
from graders.shared.tracks import DENSE, Track

if TYPE_CHECKING:  # graders.shared.plans imports torch
    from graders.shared.plans import Tell

Status = Literal["pass", "fail", "error", "timeout", "not_attempted"]


@dataclass(frozen=True)
class ItemResult:
    """One rubric item's outcome.

    `unavailable` is set when the worker could not run the item (the file does not import, say):
    the worker's reason in one line, while `message` says only "not run: <its headline>", so a
    report can give the reason once rather than once an item. `signature`: the candidate's
    exception that made it an error (type, message, place in the candidate's file), if one did,
    so that a report can group the items one exception took down (graders.formats.causes).
    """

    id: str
    level: str
    status: Status
    points: float
    max_points: float
    message: str
    unavailable: str | None = None
    signature: tuple[str, str, str] | None = None

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def full_message(self) -> str:
        """The message with the worker's reason when there is one: for outputs that show each
        item on its own (JSON, JUnit, Gradescope)."""
        return f"not run: {self.unavailable}" if self.unavailable else self.message


@dataclass(frozen=True)
class TellResult:
    """A down-level tell: `checked` is false when no item that looks for it ran (then `detected`
    is false too, and `message` says it was not checked)."""

    id: str
    detected: bool
    message: str
    checked: bool = True


@dataclass(frozen=True)
class GradeResult:
    """A grade, built by `from_items` (the judge, an interrupted final grade) and never changed
    after: a copy under another name is `dataclasses.replace`'s. `level` is None for a `partial`
    run (items left out by only, up_to or exitfirst): a level needs every item. `capped_by`
    names the detected tells that lowered the level below the one its items reach, and is empty
    when no cap lowered it."""

    implementation: str
    level: str | None
    items: list[ItemResult]
    tells: list[TellResult]
    hidden: bool
    grader_broke: bool = False
    capped_by: list[str] = field(default_factory=list)
    track: str = DENSE.id
    isolation: str | None = (
        "process"  # how the code was isolated: "bwrap", "process" (None: not heard)
    )
    partial: bool = False
    seed: int | None = None  # the hidden cases' seed (hidden runs only)
    similarity: list[dict] | None = None  # graders.judge.similarity.similarity (hidden runs only)

    @classmethod
    def from_items(
        cls,
        implementation: str,
        track: Track,
        items: list[ItemResult],
        seen: list[Tell] | None,
        *,
        hidden: bool,
        grader_broke: bool = False,
        isolation: str | None = "process",
        seed: int | None = None,
        similarity: list[dict] | None = None,
    ) -> GradeResult:
        """The grade of `items` (in any order; listed in rubric order) and the tells `seen` (the
        observations of the items that ran; None: none heard, and no tells listed). A grade
        with fewer items than its track's (L6+ aside) is partial and has no level; else its level is
        `level`'s. A track without levels has no tells."""
        rubric = rubric_data.load()
        in_rubric = [item.id for item in rubric.track(track)]
        items = sorted(
            items, key=lambda item: in_rubric.index(item.id)
        )  # whatever order they ran in
        core = [item for item in rubric.track(track) if item.level != rubric_data.PLUS]
        partial = len([i for i in items if i.level != rubric_data.PLUS]) < len(core)
        tells = tell_results(rubric, seen) if track.levels and seen is not None else []
        reached, capped_by = (None, []) if partial else level(track, items, tells)
        return cls(
            implementation,
            reached,
            items,
            tells,
            hidden,
            grader_broke,
            capped_by,
            track.id,
            isolation,
            partial,
            seed,
            similarity,
        )

    @property
    def unavailable(self) -> str | None:
        """Why the worker could not run items, in one line (see ItemResult), or None."""
        return next((i.unavailable for i in self.items if i.unavailable), None)

    @property
    def score(self) -> float:
        """Out of the 100 of L4 to L6 (or of a track beside the levels): L6+ is plus_score."""
        return sum(i.points for i in self.items if i.level != rubric_data.PLUS)

    @property
    def max_score(self) -> float:
        return sum(i.max_points for i in self.items if i.level != rubric_data.PLUS)

    @property
    def plus_score(self) -> float:
        """The L6+ items' points, outside the 100."""
        return sum(i.points for i in self.items if i.level == rubric_data.PLUS)

    @property
    def plus_max_score(self) -> float:
        return sum(i.max_points for i in self.items if i.level == rubric_data.PLUS)

    @property
    def plus_started(self) -> bool:
        """Whether an L6+ item was attempted. A file that has not started L6+ (or has not
        reached L6) is reported without its L6+ items: the formats give the group one line."""
        return any(i.level == rubric_data.PLUS and i.status != "not_attempted" for i in self.items)

    @property
    def reported(self) -> list[ItemResult]:
        """The items a report lists one by one: all of them, less the L6+ ones while L6+ is not
        started."""
        return [i for i in self.items if self.plus_started or i.level != rubric_data.PLUS]

    @property
    def passed(self) -> bool:
        """Every item passed; an L6+ item not attempted does not count against it (a file need
        not go past L6), one that fails does."""
        return all(
            i.passed or (i.level == rubric_data.PLUS and i.status == "not_attempted")
            for i in self.items
        )

    def exit_code(self) -> int:
        if self.grader_broke:
            return 4
        return 0 if self.passed else 1


def tell_results(rubric: rubric_data.Rubric, seen: list[Tell]) -> list[TellResult]:
    """Each of the rubric's tells, from the observations `seen`: detected when one saw it,
    clear when one looked, else not checked."""
    results = []
    for info in rubric.tells:
        observations = [t for t in seen if t.id == info.id]
        detected = [t for t in observations if t.detected]
        if detected:
            results.append(TellResult(info.id, True, detected[0].message))
        elif observations:
            results.append(TellResult(info.id, False, observations[0].message))
        else:
            results.append(
                TellResult(
                    info.id,
                    False,
                    "not checked: the item that looks for it did not run",
                    checked=False,
                )
            )
    return results


def level(track: Track, items: list[ItemResult], tells: list[TellResult]) -> tuple[str, list[str]]:
    """The level `items` reach, and the tells that capped it: the contract's rule, applied to
    the items given (a whole grade's, or a save's on the stages open). A track without levels
    reaches its section when every item passes, else "none", and has no caps. On the levels:
    the highest level whose items, and every lower level's, all pass, "below L4" when none
    does; a detected tell caps that at its level. The tells returned are those whose cap is
    the level given, below the one reached (none when no cap lowered it)."""
    if not track.levels:
        return (track.section if items and all(i.passed for i in items) else "none"), []
    rubric = rubric_data.load()
    reached = None
    for each in rubric.levels:
        upto = [r for r in items if rubric.levels.index(r.level) <= rubric.levels.index(each)]
        graded_here = any(r.level == each for r in items)
        if not graded_here or not all(r.passed for r in upto):
            break
        reached = each
    if reached is None:
        return "below L4", []
    caps = {t.id: rubric.tell(t.id).caps for t in tells if t.detected}
    capped = min([reached, *caps.values()], key=rubric.levels.index)
    return capped, [tell for tell, cap in caps.items() if cap == capped != reached]
