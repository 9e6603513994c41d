"""What the interactive `kata interview` keeps across saves, so that a save shows its verdict
soonest (issue 33: within 0.8x an import of torch; docs/decisions.md, "A save's verdict, kept
warm").

- OwnTestsVerdict: the own-tests item judges the candidate's test file against the bundled
  implementations, never the file being graded (graders/dense/items/own_tests.py), so its verdict
  holds for as long as the test file's bytes do. A save that changes kv_cache.py alone takes the
  verdict the same test file got before, and its grade skips the item: no disguises drawn, no
  pytest runs, no worker for the tests.
- NextWorkers: the next save's workers, started while the candidate edits (as `kata grade
  --watch` starts them): a fresh implementation worker for every save (never one that has
  imported an earlier file), and a tests worker kept, idle and warm, across the saves that do
  not run the tests.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from graders.interview import session as verbs
from graders.judge.request import GradeRequest
from graders.shared import tracks

# The tells own-tests checks (graders/dense/items/own_tests.py): a kept verdict brings them along.
OWN_TESTS_TELLS = ("shape-only-tests",)
KEPT_STATUSES = ("pass", "fail", "not_attempted")  # verdicts on the file, not on a run that broke


class OwnTestsVerdict:
    """own-tests' verdict on one test file, by the sha256 of its bytes, with the snapshot that
    got it and the tells it checked. Empty until `keep` is given a grade that ran the item."""

    def __init__(self) -> None:
        self.digest: str | None = None
        self.snapshot = ""
        self.item = None  # graders.judge.result.ItemResult
        self.tells: list = []  # graders.judge.result.TellResult of OWN_TESTS_TELLS

    def covers(self, tests: Path | None) -> bool:
        """Whether the verdict kept is that of the test file `tests` as it is now (False when
        there is none, or no such file)."""
        try:
            return self.digest is not None and tests is not None and _digest(tests) == self.digest
        except OSError:
            return False

    def keep(self, result, tests: Path | None, snapshot: str) -> None:
        """Keep the own-tests verdict of `result`, a grade of the test file `tests` (kept in
        `snapshot`); forget the one kept when the grade did not run the item, or its run broke
        (an error, a timeout, a worker that could not start: no verdict on the file)."""
        item = next((i for i in result.items if i.id == tracks.TESTS_ITEM), None)
        if item is None or item.status not in KEPT_STATUSES or item.unavailable or not tests:
            self.digest = None
            return
        self.digest, self.snapshot, self.item = _digest(tests), snapshot, item
        self.tells = [t for t in result.tells if t.id in OWN_TESTS_TELLS]

    def fill(self, result):
        """`result`, a grade that left own-tests out, with the verdict kept in its place: the
        item in rubric order (its message saying where it comes from) and its tells checked."""
        from graders.shared import rubric as rubric_data

        item = replace(
            self.item,
            message=f"as graded at {self.snapshot} (the test file is "
            f"unchanged): {self.item.message}",
        )
        order = [i.id for i in rubric_data.load().items]
        items = sorted([*result.items, item], key=lambda i: order.index(i.id))
        kept = {t.id: t for t in self.tells}
        tells = [kept.get(t.id, t) if not t.checked else t for t in result.tells]
        return replace(result, items=items, tells=tells)


class NextWorkers:
    """The workers of the next save in `workspace`: `start` once a verdict is out, `take` at
    the save, `close` when the session ends. Any that cannot be started or died while waiting
    are None, and the save starts its own."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.implementation = None  # graders.judge.workers.GradeWorkers, without a tests worker
        self.tests_worker = None  # graders.judge.workers.Worker, kept until a save runs tests
        self.tests: Path | None = None  # the file the tests worker runs

    def start(self) -> None:
        """Start a fresh implementation worker, and a tests worker when none is kept and the
        stage open runs the candidate's tests; both wait for `take`."""
        from graders.judge.workers import GradeWorkers, Worker

        try:
            session = verbs.load(self.workspace)
        except (verbs.NoSession, ValueError):  # the save says so
            return
        track = tracks.get(session["track"])
        implementation, tests = verbs.files(self.workspace, track)
        try:
            request = GradeRequest(
                implementation,
                tests if tests and tests.is_file() else None,
                track=track,
                only=frozenset(verbs.stage_items(track, session["stage"])),
                sandbox=verbs.default_sandbox(),
            )
            self.implementation = GradeWorkers.start(replace(request, tests=None), ahead=True)
            if self.tests_worker is None and request.runs_tests:
                self.tests_worker = Worker(
                    "tests",
                    isolation=self.implementation.isolation,
                    limits=request.sandbox.limits(),
                    files=[tests],
                    ahead=True,
                ).start()
                self.tests = tests
        except Exception:  # the save starts its own, and says why if it cannot either
            return

    def take(self, with_tests: bool):
        """The workers for the save now (graders.judge.workers.GradeWorkers), let go on the
        files as they are: the kept tests worker joins them `with_tests` (when there is one);
        otherwise it is kept for a later save. None when none were started ahead, or they died
        while waiting."""
        from graders.judge.workers import GradeWorkers

        workers, self.implementation = self.implementation, None
        if workers is None:
            return None
        if with_tests and self.tests_worker is not None:
            workers = GradeWorkers(
                workers.implementation,
                self.tests,
                self.tests_worker,
                workers.isolation,
                workers.model,
                workers.reference,
            )
            self.tests_worker = None
        return workers if workers.go() else None

    def close(self) -> None:
        for workers in (self.implementation, self.tests_worker):
            if workers is not None:
                workers.close()
        self.implementation = self.tests_worker = None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
