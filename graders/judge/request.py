"""A grade asked for: every setting of one grade, in one typed value, and what follows from them.

Every entry point builds one (cli.py, kvkata, grade-all, the interview; the Gradescope
autograder through cli.py), naming the track by its `Track` (`tracks.get` is called where a
string enters: the command line, the notebook API, a session's record). The workers are started
for it (graders.judge.workers.GradeWorkers.start) and the judge grades it
(graders.judge.grade.grade). Needs no torch: cli.py and kvkata build one before the judge loads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from graders.judge.isolation import Sandbox
from graders.shared import rubric as rubric_data
from graders.shared import model_answers, transformers_extra
from graders.shared.tracks import DENSE, Track

DEFAULT_TIMEOUT = 10.0  # CPU seconds one batch of the candidate's calls may take (--timeout)
DEFAULT_IMPORT_TIMEOUT = (
    60.0  # a correct file may import a large library: transformers takes 8-27 s cold
)


@dataclass(frozen=True)
class TimeBudget:
    """A grade's time as a whole, seconds on the clock from its start: `public` for the public
    cases, `hidden` for a grade with hidden cases or private graders. Past it, every item not
    yet graded is a timeout that says so. The defaults are the README's: 8-12x the reference's
    grade with its tests on the 2-core machine of the closing notes at load average 5-8
    (public 14-18 s, hidden 19-32 s), under run_autograder's backstop
    (graders.export.autograder.GRADE_SECONDS)."""

    public: float = 150.0
    hidden: float = 240.0

    def seconds(self, hidden: bool) -> float:
        return self.hidden if hidden else self.public


@dataclass(frozen=True)
class GradeRequest:
    """One grade: `implementation` (and the candidate's `tests`, None: no test file) on `track`.

    `hidden` adds each item's hidden cases and `extra_graders` an interviewer's folder of
    graders, judged as hidden; the hidden cases are drawn from `seed` (None: a fresh one, drawn
    by the judge and recorded in the result). `only` selects item ids and `up_to` the items up
    to a level (None: every item); `first` names items to run before the others (--ff), and
    `exitfirst` stops after the first item that does not pass. `import_timeout` limits the
    import of the file, `timeout` each batch of calls, `budget` the whole grade; `sandbox`
    chooses the isolation and the memory limit."""

    implementation: Path
    tests: Path | None = None
    track: Track = DENSE
    hidden: bool = False
    extra_graders: Path | None = None
    seed: int | None = None
    only: frozenset[str] | None = None
    up_to: str | None = None
    first: frozenset[str] = frozenset()
    exitfirst: bool = False
    timeout: float = DEFAULT_TIMEOUT
    import_timeout: float = DEFAULT_IMPORT_TIMEOUT
    budget: TimeBudget = TimeBudget()
    sandbox: Sandbox = Sandbox()

    @property
    def judged_hidden(self) -> bool:
        """Whether the grade is judged as hidden: hidden cases or an interviewer's graders
        (a seed, the hidden budget, similarity, no --lf record)."""
        return self.hidden or self.extra_graders is not None

    @property
    def items(self) -> list[rubric_data.Item]:
        """The items graded, in rubric order (the judge runs `first` ahead of the rest)."""
        return rubric_data.selected(self.track, self.only, self.up_to)

    @property
    def runs_tests(self) -> bool:
        """Whether the grade runs the candidate's own tests: only the own-tests item does, on a
        track that has it, when there is a test file."""
        return self.tests is not None and self.track.runs_tests({i.id for i in self.items})

    @property
    def tests_run(self) -> Path | None:
        """The test file the grade runs (absolute), None when it runs none: the file its tests
        worker holds."""
        return Path(self.tests).absolute() if self.runs_tests else None

    @property
    def runs_model(self) -> bool:
        """Whether the grade runs the real-model item, and transformers is here to run it: its
        two workers then start with the others (graders.judge.workers.GradeWorkers.start)."""
        return (
            self.track.runs_model({i.id for i in self.items})
            and transformers_extra.problem() is None
        )

    @property
    def runs_reference(self) -> bool:
        """Whether the real-model item's reference worker starts with the others: for hidden
        runs, or public ones whose DynamicCache answers are not kept yet
        (graders.shared.model_answers); else it starts only if the item asks for it."""
        return self.runs_model and (self.hidden or not model_answers.kept())

    def selecting(self, only: frozenset[str] | None, first: frozenset[str]) -> GradeRequest:
        """The same grade of the items `only`, `first` run first (graders.workflows.last_failed)."""
        return replace(self, only=only, first=first)
