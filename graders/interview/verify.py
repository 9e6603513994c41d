"""A record is a claim (issue 40): what `kata interview report` and `replay` check of it.

The record and its snapshots are the candidate's files: a session folder sent in can say
anything. Two checks, each a fact of the files, never of the record's word:

- `snapshots`: each snapshot the record names (every save's, the final's) against its name,
  `NNN-<first 8 hex of the sha256 of both files>` (contract section 7). No grade: the report
  and the replay always make it.
- `verify` (`--verify`): every save's snapshot graded again on the public cases of the stages
  the grades themselves open (a save that reaches its stage's level opens the next, as in the
  session), and the final snapshot with `--hidden` at the recorded seed. Each claim (a save's
  level, score and items passing; the stages opened; the final grade's level, score, items,
  tells and similarity) is set beside the grade's word on it.

A claim disagrees where the grade says otherwise; where the grade could not say (an item that
timed out, a worker that could not start) the claim is `unchecked`, never called edited. What
no grade can check is the record's word (RECORDS_WORD).

Speed: the saves are graded in order, each with workers started while the one before is graded
(their torch imports overlap the grade); own-tests' verdict on a test file is kept across the
snapshots that hold the same bytes (graders.interview.warm.OwnTestsVerdict: it judges the test
file, never the implementation); the final hidden grade runs beside the saves' from the start.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Literal

from graders.interview import record, session as verbs
from graders.judge.request import GradeRequest
from graders.shared import rubric as rubric_data
from graders.shared import tracks

Verdict = Literal["agrees", "disagrees", "unchecked"]
RECORDS_WORD = (
    "the time of every event, the hints and solutions asked (nothing but the record "
    "records them), and the answers in answers.md"
)
UNCHECKED_STATUSES = ("timeout",)  # a grade that could not say; `unavailable` items too


@dataclass(frozen=True)
class Snapshot:
    """A snapshot the record names, and the hash of its files as they are (`actual`; None when
    the folder or its implementation is missing)."""

    name: str
    actual: str | None

    @property
    def matches(self) -> bool:
        return self.actual is not None and self.name.endswith(f"-{self.actual}")

    def problem(self, shown: Callable[[str], str]) -> str:
        """Why it does not match its name, in words ("" when it does), its name as `shown`
        shows a field of the record."""
        if self.matches:
            return ""
        if self.actual is None:
            return f"snapshot {shown(self.name)} is missing (the record names it)"
        return (
            f"snapshot {shown(self.name)}'s files do not match its name: they hash to {self.actual}"
        )


@dataclass(frozen=True)
class Graded:
    """A grade's word on one snapshot: the level reached, the score, the items passing, and the
    items it could not grade (`unchecked`: timed out, or no worker to run them)."""

    level: str
    score: float
    passing: tuple[str, ...]
    unchecked: tuple[str, ...] = ()

    def summary(self) -> str:
        return f"{self.level}, {self.score:g} points, {len(self.passing)} items pass"


@dataclass(frozen=True)
class SaveCheck:
    """A save event (`event`, the record's claim) beside its snapshot's grade (`graded`, None
    when the snapshot is missing) at the stage the grades open (`stage`). `differences` names
    what disagrees, in words."""

    event: dict
    stage: str
    graded: Graded | None
    verdict: Verdict
    differences: tuple[str, ...] = ()


@dataclass(frozen=True)
class FinalCheck:
    """The final grade's claim beside its snapshot graded again with `--hidden` at the recorded
    seed (`graded`: its level, score and items; None when it could not be graded)."""

    graded: Graded | None
    verdict: Verdict
    differences: tuple[str, ...] = ()


@dataclass(frozen=True)
class StagesCheck:
    """The stages the record says opened (after which save) beside those the grades open."""

    claimed: tuple[tuple[int, str], ...]  # (the save's number in order, from 1; the stage)
    graded: tuple[tuple[int, str], ...]
    verdict: Verdict


@dataclass(frozen=True)
class Verification:
    """What was checked of a record: its snapshots always; with `--verify` (`verified`) its
    saves, stages and final grade too."""

    snapshots: tuple[Snapshot, ...]
    saves: tuple[SaveCheck, ...] = ()
    stages: StagesCheck | None = None
    final: FinalCheck | None = None
    verified: bool = False
    seconds: float = 0.0

    @property
    def mismatched(self) -> tuple[Snapshot, ...]:
        return tuple(s for s in self.snapshots if not s.matches)

    @property
    def disagreeing(self) -> int:
        """How many claims disagree with their grade."""
        checks = [*self.saves, *(c for c in (self.stages, self.final) if c is not None)]
        return sum(c.verdict == "disagrees" for c in checks)

    @property
    def unchecked(self) -> int:
        checks = [*self.saves, *(c for c in (self.stages, self.final) if c is not None)]
        return sum(c.verdict == "unchecked" for c in checks)

    @property
    def edited(self) -> bool:
        """Whether the record is shown as edited: a snapshot that does not match its name, or
        a claim its grade disagrees with."""
        return bool(self.mismatched) or self.disagreeing > 0

    def save_of(self, event: dict) -> SaveCheck | None:
        return next((c for c in self.saves if c.event is event), None)

    def snapshot(self, name: str) -> Snapshot | None:
        return next((s for s in self.snapshots if s.name == name), None)


def snapshots(session: dict, workspace: Path) -> tuple[Snapshot, ...]:
    """Each snapshot the record names, in the order it names them, against its name."""
    track = tracks.get(session["track"])
    names = [e["snapshot"] for e in session["events"] if e["kind"] == "save"]
    if session["final"] is not None:
        names.append(session["final"]["implementation"].split("/")[0])
    return tuple(
        Snapshot(name, _hash(record.folder(workspace) / name, track))
        for name in dict.fromkeys(names)
    )


def unverified(session: dict, workspace: Path) -> Verification:
    """The checks made without `--verify`: the snapshots against their names."""
    return Verification(snapshots(session, workspace))


def verify(session: dict, workspace: Path, sandbox) -> Verification:
    """Every claim of the record beside a grade of its snapshot (the module's docstring).
    `sandbox`: the graders.judge.isolation.Sandbox of every grade (SandboxUnavailable, before
    any grade, when it cannot be had)."""
    import time

    started = time.perf_counter()
    sandbox.resolve()  # refuse before anything runs
    track = tracks.get(session["track"])
    found = snapshots(session, workspace)
    final = (
        _Beside(lambda: _final(session, workspace, track, sandbox))
        if session["final"] is not None
        else None
    )
    saves, stages = _saves(session, workspace, track, sandbox)
    return Verification(
        found,
        saves,
        stages,
        final.result() if final else None,
        verified=True,
        seconds=time.perf_counter() - started,
    )


class _Beside:
    """`work()` run in a thread of its own from now; `result()` waits for it, and raises what
    it raised."""

    def __init__(self, work) -> None:
        self._out: list = []
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work) -> None:
        try:
            self._out.append((True, work()))
        except BaseException as exc:  # handed to the caller of result()
            self._out.append((False, exc))

    def result(self):
        self._thread.join()
        ok, value = self._out[0]
        if not ok:
            raise value
        return value


def _saves(
    session: dict, workspace: Path, track: tracks.Track, sandbox
) -> tuple[tuple[SaveCheck, ...], StagesCheck]:
    """Each save graded again in order, at the stage the grades before it open."""
    from graders.interview.warm import OwnTestsVerdict

    order = verbs.stages(track)
    events = [e for e in session["events"] if e["kind"] == "save"]
    claimed_stages = _claimed_stages(session)
    kept, ahead = OwnTestsVerdict(), _Ahead(workspace, track, sandbox)
    stage, checks, opened = order[0], [], []
    try:
        ahead.start(events[0] if events else None, stage)
        for n, event in enumerate(events):
            workers = ahead.take(event)
            # The next save's workers import torch while this one is graded; which stage it
            # is graded at is known after this grade, so the record's claim is the guess.
            claimed_next = next((s for k, s in claimed_stages if k == n + 1), stage)
            ahead.start(events[n + 1] if n + 1 < len(events) else None, claimed_next)
            graded = _grade_save(workspace, track, event, stage, sandbox, workers, kept)
            check = _compare_save(event, stage, graded)
            checks.append(check)
            # A grade that could not judge the save (unchecked) leaves the record's word on it.
            level = event["level"] if check.verdict == "unchecked" else graded.level
            if level == stage and order.index(stage) + 1 < len(order):
                stage = order[order.index(stage) + 1]
                opened.append((n + 1, stage))
    finally:
        ahead.close()
    graded_stages = tuple(opened)
    agrees = graded_stages == claimed_stages and session["stage"] == stage
    return tuple(checks), StagesCheck(
        claimed_stages, graded_stages, "agrees" if agrees else "disagrees"
    )


def _claimed_stages(session: dict) -> tuple[tuple[int, str], ...]:
    """The stages the record says opened, each after the number of saves before it."""
    out, count = [], 0
    for event in session["events"]:
        if event["kind"] == "save":
            count += 1
        elif event["kind"] == "stage":
            out.append((count, event["stage"]))
    return tuple(out)


def _grade_save(
    workspace: Path, track: tracks.Track, event: dict, stage: str, sandbox, workers, kept
) -> Graded | None:
    """The grade of a save's snapshot on the items open at `stage` (None: no snapshot), with
    own-tests' verdict taken from `kept` when it holds this test file's; `workers` started for
    it ahead, or None."""
    from graders.judge.grade import grade
    from graders.judge.workers import GradeWorkers

    folder = record.folder(workspace) / event["snapshot"]
    implementation, tests = verbs.files(folder, track)
    if not implementation.is_file():
        if workers is not None:
            workers.close()
        return None
    tests = tests if tests and tests.is_file() else None
    request = GradeRequest(
        implementation,
        tests,
        track=track,
        only=frozenset(verbs.stage_items(track, stage)),
        sandbox=sandbox,
    )
    reuse = request.runs_tests and kept.covers(tests)
    if reuse:
        request = replace(request, only=request.only - {tracks.TESTS_ITEM})
    if workers is not None and not workers.fits(request):
        workers.close()  # started for another guess: the grade starts its own
        workers = None
    result = grade(request, workers or GradeWorkers.start(request))
    if reuse:
        result = kept.fill(result)
    else:
        kept.keep(result, tests, event["snapshot"])
    return _graded(result, track)


def _graded(result, track: tracks.Track) -> Graded:
    unchecked = tuple(i.id for i in result.items if i.status in UNCHECKED_STATUSES or i.unavailable)
    return Graded(
        verbs.reached(result, track),
        result.score,
        tuple(i.id for i in result.items if i.passed),
        unchecked,
    )


def _compare_save(event: dict, stage: str, graded: Graded | None) -> SaveCheck:
    """The save's claim beside its grade: `disagrees` where an item the grade judged is claimed
    otherwise, or (no item unjudged) where the level or score differs."""
    if graded is None:
        return SaveCheck(event, stage, None, "unchecked", ("its snapshot is missing",))
    claimed, passing = set(event["passing"]), set(graded.passing)
    judged = (claimed ^ passing) - set(graded.unchecked)  # items both claim and grade judge
    differences = []
    if event["level"] != graded.level:
        differences.append(f"level {graded.level}, not {event['level']}")
    if abs(event["score"] - graded.score) > 1e-9:
        differences.append(f"score {graded.score:g}, not {event['score']:g}")
    if claimed - passing:
        differences.append("not passing: " + ", ".join(sorted(claimed - passing)))
    if passing - claimed:
        differences.append("passing too: " + ", ".join(sorted(passing - claimed)))
    if not differences:
        return SaveCheck(event, stage, graded, "agrees")
    verdict = "disagrees" if judged or not graded.unchecked else "unchecked"
    return SaveCheck(event, stage, graded, verdict, tuple(differences))


def _final(session: dict, workspace: Path, track: tracks.Track, sandbox) -> FinalCheck:
    """The final snapshot graded again with the hidden cases at the recorded seed (only the
    items an interrupted final graded), beside the final's claim."""
    from graders.judge.grade import grade
    from graders.judge.workers import GradeWorkers

    claim = session["final"]
    folder = record.folder(workspace) / claim["implementation"].split("/")[0]
    implementation, tests = verbs.files(folder, track)
    if not implementation.is_file() or claim["seed"] is None:
        return FinalCheck(
            None,
            "unchecked",
            ("its snapshot is missing",) if claim["seed"] is not None else ("it records no seed",),
        )
    only = frozenset(i["id"] for i in claim["items"]) if claim["partial"] else None
    request = GradeRequest(
        implementation,
        tests if tests and tests.is_file() else None,
        track=track,
        hidden=True,
        seed=claim["seed"],
        only=only,
        sandbox=sandbox,
    )
    result = grade(request, GradeWorkers.start(request))
    graded = Graded(
        result.level or "none",
        result.score,
        tuple(i.id for i in result.items if i.passed),
        tuple(i.id for i in result.items if i.status in UNCHECKED_STATUSES or i.unavailable),
    )
    return _compare_final(claim, result, graded)


def _compare_final(claim: dict, result, graded: Graded) -> FinalCheck:
    statuses = {i.id: i.status for i in result.items}
    claimed = {i["id"]: i["status"] for i in claim["items"]}
    differences, judged = [], False
    if not claim["partial"] and claim["level"] != result.level:
        differences.append(f"level {result.level}, not {claim['level']}")
    if (
        abs(claim["score"] - result.score) > 1e-9
        or abs(claim["max_score"] - result.max_score) > 1e-9
    ):
        differences.append(
            f"{result.score:g}/{result.max_score:g} points, not "
            f"{claim['score']:g}/{claim['max_score']:g}"
        )
    order = [item.id for item in rubric_data.load().items]
    for item_id in sorted(set(statuses) | set(claimed), key=order.index):
        if statuses.get(item_id) != claimed.get(item_id):
            differences.append(
                f"{item_id} {statuses.get(item_id, 'not graded')}, not "
                f"{claimed.get(item_id, 'listed')}"
            )
            judged = judged or item_id not in graded.unchecked
    detected = {t.id for t in result.tells if t.detected}
    claimed_tells = {t["id"] for t in claim["tells"] if t["detected"]}
    if detected != claimed_tells:
        differences.append(
            "tells detected: "
            + (", ".join(sorted(detected)) or "none")
            + ", not "
            + (", ".join(sorted(claimed_tells)) or "none")
        )
        judged = True
    graded_shares, claimed_shares = (
        _fractions(result.similarity),
        _fractions(claim.get("similarity")),
    )
    for name in sorted(set(graded_shares) | set(claimed_shares)):
        if graded_shares.get(name) != claimed_shares.get(name):
            differences.append(
                f"similarity to {name} {_share(graded_shares.get(name))}, not "
                f"{_share(claimed_shares.get(name))}"
            )
            judged = True
    if not differences:
        return FinalCheck(graded, "agrees")
    verdict = "disagrees" if judged or not graded.unchecked else "unchecked"
    return FinalCheck(graded, verdict, tuple(differences))


def _fractions(similarity) -> dict:
    return {s["solution"]: round(s["fraction"], 9) for s in similarity or []}


def _share(fraction: float | None) -> str:
    return "none" if fraction is None else f"{fraction:.0%}"


def _hash(folder: Path, track: tracks.Track) -> str | None:
    """The content hash of a snapshot folder's files (record.content_hash); None when it has no
    implementation."""
    implementation, tests = verbs.files(folder, track)
    try:
        data = implementation.read_bytes()
    except OSError:
        return None
    try:
        test_data = tests.read_bytes() if tests is not None else None
    except FileNotFoundError:
        test_data = None
    except OSError:
        return None
    return record.content_hash(data, test_data)


@dataclass
class _Ahead:
    """The next save's workers, started while the save before it is graded: its snapshot's
    implementation worker, and a tests worker when the stage the record claims for it runs
    the candidate's tests on a test file no grade has judged yet (a guess: a wrong one costs
    only the workers, which the grade then starts itself)."""

    workspace: Path
    track: tracks.Track
    sandbox: object
    event: dict | None = None
    workers: object = None  # graders.judge.workers.GradeWorkers
    judged: set = field(default_factory=set)  # the test files' hashes guessed run already

    def start(self, event: dict | None, stage: str) -> None:
        from graders.judge.workers import GradeWorkers

        self.close()
        if event is None:
            return
        implementation, tests = verbs.files(
            record.folder(self.workspace) / event["snapshot"], self.track
        )
        if not implementation.is_file():
            return
        run_tests = None
        guess = GradeRequest(
            implementation,
            tests if tests and tests.is_file() else None,
            track=self.track,
            only=frozenset(verbs.stage_items(self.track, stage)),
            sandbox=self.sandbox,
        )
        if guess.runs_tests:
            digest = hashlib.sha256(tests.read_bytes()).hexdigest()
            run_tests = None if digest in self.judged else tests
            self.judged.add(digest)
        try:
            self.workers = GradeWorkers.start(replace(guess, tests=run_tests))
            self.event = event
        except Exception:  # the grade starts its own, and says why if it cannot either
            self.workers = None

    def take(self, event: dict):
        """The workers started for `event`'s snapshot (None: none were)."""
        workers, self.workers = (self.workers, None) if self.event is event else (None, None)
        return workers

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()
        self.workers = self.event = None
