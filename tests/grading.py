"""The tests' shorthand for one grade: a file and keyword settings, as a GradeRequest, graded in
workers started for it (as every entry point of the kata does: graders/README.md, "The path of
a grade"). `track` may be named by its id."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from graders.judge.result import GradeResult, ItemResult
from graders.judge.grade import grade as judge_grade
from graders.judge.request import GradeRequest
from graders.judge.workers import GradeWorkers
from graders.shared import tracks
from graders.shared.tracks import DENSE, Track


def request(
    implementation: Path,
    tests: Path | None = None,
    *,
    track: Track | str = DENSE,
    only=None,
    first=(),
    **settings,
) -> GradeRequest:
    """The GradeRequest of `implementation` (and `tests`) with `settings` (its fields)."""
    return GradeRequest(
        Path(implementation),
        None if tests is None else Path(tests),
        track=tracks.get(track) if isinstance(track, str) else track,
        only=None if only is None else frozenset(only),
        first=frozenset(first),
        **settings,
    )


def grade(
    implementation: Path,
    tests: Path | None = None,
    *,
    workers: GradeWorkers | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
    kept: dict[str, ItemResult] | None = None,
    **settings,
) -> GradeResult:
    """Grade `implementation` with `settings` (`request`'s), in `workers` when given (started
    ahead, say), else in workers started here; the items in `kept` taken as they are."""
    asked = request(implementation, tests, **settings)
    return judge_grade(asked, workers or GradeWorkers.start(asked), on_item, kept)


class NoWorkers:
    """Workers that are no processes, for a stand-in judge: what GradeWorkers.start gives while
    `stand_in` holds."""

    isolation = "process"

    def __init__(self, request: GradeRequest) -> None:
        self.tests = request.tests_run
        self.closed = False

    def fits(self, request: GradeRequest) -> bool:
        return (self.tests is None) == (request.tests_run is None)

    def go(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def stand_in(monkeypatch, fake: Callable[..., GradeResult]) -> None:
    """The judge replaced by `fake(request, on_item)` (closing the workers, as the judge does),
    and the workers by NoWorkers: no process starts. Every path to the judge is patched: its
    module's `grade` and the name grade-all imports."""

    def judge(request, workers, on_item=None, kept=None):
        workers.close()
        return fake(request, on_item)

    monkeypatch.setattr(
        GradeWorkers, "start", classmethod(lambda cls, request, ahead=False: NoWorkers(request))
    )
    monkeypatch.setattr("graders.judge.grade.grade", judge)
    monkeypatch.setattr("graders.workflows.batch.grade", judge)
