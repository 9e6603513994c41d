"""Grade one implementation: run every item's graders, then apply the rubric.

The judge's side of a grade. It starts the workers first (their torch import overlaps the judge's),
runs each rubric item's graders in rubric order, turns what happened into a status, and works out
the level: the highest level whose items, and every lower level's, all pass, capped by the tells.
A run that leaves items out is partial and has no level. The L6+ items run last, and only once
every item before them passed (else they are not attempted); a run without them is not partial.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import secrets
import sys
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

from graders.judge.candidate import Candidate
from graders.judge.isolation import Sandbox, reap_strays
from graders.judge.similarity import similarity
from graders.judge.workers import Budget, GradeWorkers, WorkerUnavailable
from graders.shared import hidden_cases, tracks, transformers_extra
from graders.shared import rubric as rubric_data
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted, Tell
from graders.shared.tracks import DENSE

DEFAULT_TIMEOUT = 10.0
DEFAULT_IMPORT_TIMEOUT = 60.0  # a correct file may import a large library: transformers takes 8-27 s cold
MAX_TIMEOUTS = 3
# An L6+ item's message when an item before it did not pass: the follow-ups past L6 start there.
BEFORE_PLUS = "not started: L6+ is graded once every item of L4 to L6 passes (own tests aside)"


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


@dataclass
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
    status: str  # pass | fail | error | timeout | not_attempted
    points: float
    max_points: float
    message: str
    unavailable: str | None = None
    signature: tuple[str, str, str] | None = None

    @property
    def full_message(self) -> str:
        """The message with the worker's reason when there is one: for outputs that show each
        item on its own (JSON, JUnit, Gradescope)."""
        return f"not run: {self.unavailable}" if self.unavailable else self.message


@dataclass
class TellResult:
    """A down-level tell: `checked` is false when no item that looks for it ran (then `detected`
    is false too, and `message` says it was not checked)."""

    id: str
    detected: bool
    message: str
    checked: bool = True


@dataclass
class GradeResult:
    """A grade. `level` is None for a `partial` run (items left out by only, up_to or exitfirst):
    a level needs every item. `capped_by` names the detected tells that lowered the level below
    the one its items reach, and is empty when no cap lowered it."""

    implementation: str
    level: str | None
    items: list[ItemResult]
    tells: list[TellResult]
    hidden: bool
    grader_broke: bool = False
    capped_by: list[str] = field(default_factory=list)
    track: str = DENSE.id
    isolation: str = "process"  # how the candidate's code was isolated: "bwrap" or "process"
    partial: bool = False
    seed: int | None = None  # the hidden cases' seed (hidden runs only)
    similarity: list[dict] | None = None  # graders.judge.similarity.similarity (hidden runs only)

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
        return all(i.status == "pass" or (i.level == rubric_data.PLUS and i.status == "not_attempted")
                   for i in self.items)

    def exit_code(self) -> int:
        if self.grader_broke:
            return 4
        return 0 if self.passed else 1


@dataclass(frozen=True)
class Grader:
    item: str
    grade: Callable[[Candidate], str]
    hidden: bool


class PrivateGraderError(Exception):
    """An interviewer's grader file that cannot be used: one line naming the file and the problem."""


@cache
def kata_graders(hidden: bool) -> tuple[Grader, ...]:
    """The kata's own graders, one file an item in each track's items package (`Track.items`):
    each file's `grade`, or with `hidden` its `grade_hidden` (a file without hidden cases has
    none), in file-name order across the tracks. Loaded once a process."""
    found = sorted((info.name, track.items) for track in tracks.TRACKS.values()
                   for info in pkgutil.iter_modules(importlib.import_module(track.items).__path__)
                   if not info.name.startswith("_"))
    modules = [importlib.import_module(f"{package}.{name}") for name, package in found]
    if hidden:
        return tuple(Grader(m.ITEM, m.grade_hidden, True) for m in modules if hasattr(m, "grade_hidden"))
    return tuple(Grader(m.ITEM, m.grade, False) for m in modules)


@cache
def private_graders(folder: Path, track: tracks.Track) -> tuple[Grader, ...]:
    """An interviewer's graders (docs/private-graders.md), judged as hidden: the `grade` of every
    `*.py` in `folder` (names starting with `_` are skipped), in name order. PrivateGraderError
    for a file that raises on import, lacks ITEM or a callable `grade`, or whose ITEM is not an
    item of `track`'s rubric: a case that would never run must not show as a pass. Each file
    runs once a process."""
    items = {item.id for item in rubric_data.load().track(track)}
    graders = []
    for path in sorted(Path(folder).glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = _load_private(path)
        item = getattr(module, "ITEM", None)
        if not isinstance(item, str):
            raise PrivateGraderError(f"{path}: defines no ITEM (the rubric id it grades)")
        if item not in items:
            raise PrivateGraderError(f"{path}: ITEM {item!r} is not an item of the {track.id} "
                                     "track (kata rubric lists them)")
        if not callable(getattr(module, "grade", None)):
            raise PrivateGraderError(f"{path}: defines no grade(candidate) function")
        graders.append(Grader(item, module.grade, True))
    return tuple(graders)


def _load_private(path: Path) -> ModuleType:
    """`path` run as a module of its own name; PrivateGraderError when it raises."""
    name = f"kata_private_graders_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would: dataclasses in the file look it up
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - SystemExit too: one line, never a traceback
        del sys.modules[name]
        problem = traceback.format_exception_only(exc)[-1].strip()
        raise PrivateGraderError(f"{path}: raises on import: {problem}") from None
    return module


def grade(implementation: Path, tests: Path | None = None, *, track: str = DENSE.id,
          hidden: bool = False, extra_graders: Path | None = None, only: set[str] | None = None,
          up_to: str | None = None, exitfirst: bool = False, timeout: float = DEFAULT_TIMEOUT,
          import_timeout: float = DEFAULT_IMPORT_TIMEOUT, sandbox: Sandbox = Sandbox(),
          seed: int | None = None, first: set[str] | None = None,
          workers: GradeWorkers | None = None, budget: TimeBudget = TimeBudget(),
          on_item: Callable[[ItemResult], None] | None = None,
          kept: dict[str, ItemResult] | None = None) -> GradeResult:
    """Grade `implementation` (and the candidate's `tests`, when given) against the rubric.

    `track` is the id of a graders.shared.tracks.Track (a track without own-tests does not run
    `tests`). `hidden` adds each item's hidden cases, and `extra_graders` an interviewer's own
    folder of graders, judged as hidden (PrivateGraderError, before anything runs, for a file
    that cannot be used). Hidden cases are drawn from `seed` (graders.shared.hidden_cases), a fresh
    one when None; the result records it. `only` selects item ids, `up_to` the items up to a level; `exitfirst`
    stops after the first item that does not pass (the rest are left out of the result).
    `first` names items to run before the others (`kata grade --ff`): the items run in rubric
    order within each of the two groups, `on_item` hears of each as it ends, and the result
    lists them in rubric order. The candidate's own tests run from the start, beside the other
    items, and are heard of last (unless `exitfirst`: then in their turn). The order changes no
    item's checks or cases (each draws its own, from its own seeds); it decides only which items
    `exitfirst` leaves out, and which the budget of MAX_TIMEOUTS hangs leaves unrun.
    `import_timeout` limits the import of the file, `timeout` each batch of calls, `budget` the
    whole grade (the items not graded when it is spent are timeouts). `sandbox`
    chooses the isolation (SandboxUnavailable when it cannot be had) and the memory limit.
    `workers`: the workers already started for these files (GradeWorkers.start, by a caller that
    starts them before it imports torch), else started here; closed either way.
    `kept`: results of items not to run again, taken as they are (`kata grade --watch` keeps
    the real-model item's verdict while the implementation's bytes are unchanged).
    Returns only once every process the candidate's code started is gone.
    A hidden run also records how much of the file matches each bundled solution of the track
    (graders.judge.similarity): information for the interviewer, which no status or level uses.
    Sets this process's torch to one thread: the judge's tensors are tiny, and a thread pool
    only adds overhead (and spin-waits on a busy machine).
    """
    chosen = tracks.get(track)
    try:
        graders = _graders(hidden, extra_graders, chosen)
        judged_hidden = hidden or extra_graders is not None
        spent = Budget.starting_now(budget.seconds(judged_hidden))
        seed = (seed if seed is not None else draw_seed()) if judged_hidden else None
        path = Path(implementation).absolute()
        # Read before the candidate's code runs: in the process fallback it can rewrite its file.
        borrowed = similarity(path, chosen) if judged_hidden else None
        items = _run_order(rubric_data.selected(chosen, only, up_to), first or set())
        runs_tests = chosen.runs_tests({item.id for item in items})
        tests = Path(tests).absolute() if tests and runs_tests else None
        kept = kept or {}
        runs_model = (chosen.runs_model({item.id for item in items} - set(kept))
                      and not transformers_extra.problem())
        workers = workers or GradeWorkers.start(path, tests, chosen.module, sandbox, import_timeout,
                                                real_model=runs_model)
        if workers.model is None or workers.reference is None:  # a caller's, without them
            workers.model, workers.reference = GradeWorkers.model_workers(
                path, chosen.module, workers.isolation, sandbox, import_timeout)
        workers.limit_to(spent)
        torch.set_num_threads(1)
        with hidden_cases.run_seed(seed) if judged_hidden else nullcontext():
            candidate = Candidate(workers.implementation, timeout, workers.tests,
                                  workers.test_worker, workers.model, workers.reference)
            result = _grade(candidate, str(implementation), items, graders, judged_hidden,
                            exitfirst, on_item, chosen, spent, kept)
    finally:
        if workers:
            workers.close()
        reap_strays()  # nothing the candidate started outlives the grade
    result.isolation, result.seed = workers.isolation, seed
    result.similarity = borrowed
    return result


def draw_seed() -> int:
    """A fresh seed for a hidden run: from the OS, never the same twice in practice, so no one
    can read the cases ahead of the run."""
    return secrets.randbelow(10**7)


def _run_order(items: list[rubric_data.Item], first: set[str]) -> list[rubric_data.Item]:
    """`items` (in rubric order) with those named in `first` moved ahead, each group in order."""
    return sorted(items, key=lambda item: item.id not in first)


def _graders(hidden: bool, extra_graders: Path | None, track: tracks.Track) -> list[Grader]:
    """The public graders, then the hidden ones and an interviewer's own when asked for."""
    graders = list(kata_graders(hidden=False))
    if hidden:
        graders += kata_graders(hidden=True)
    if extra_graders is not None:
        graders += private_graders(extra_graders, track)
    return graders


def _grade(candidate: Candidate, name: str, items: list[rubric_data.Item], graders: list[Grader],
           hidden: bool, exitfirst: bool, on_item: Callable[[ItemResult], None] | None,
           track: tracks.Track, spent: Budget,
           kept: dict[str, ItemResult] | None = None) -> GradeResult:
    rubric = rubric_data.load()
    results, broke, unavailable, timeouts = [], False, None, 0
    first_raised: dict[tuple, str] = {}  # an exception's signature -> the first item it failed
    with ThreadPoolExecutor(1) as beside:
        early = _start_tests_early(items, graders, candidate, beside, exitfirst)
        if early:  # its outcome is taken last, when the other items are done
            items = sorted(items, key=lambda item: item.id == tracks.TESTS_ITEM)
        items = sorted(items, key=lambda item: item.level == rubric_data.PLUS)  # L6+ after all
        for item in items:
            item_graders = [g for g in graders if g.item == item.id]
            ran_beside = early is not None and item.id == tracks.TESTS_ITEM
            if kept and item.id in kept:
                result = kept[item.id]
            elif unavailable is not None:
                result = _not_run(item, unavailable)
            elif item.level == rubric_data.PLUS and not _implementation_passed(results):
                result = _result(item, "not_attempted", BEFORE_PLUS)
            elif spent.spent() and not ran_beside:
                result = _result(item, "timeout", f"not run: {spent.message()}")
            elif timeouts >= MAX_TIMEOUTS and not ran_beside:  # hangs of the implementation
                result = _result(item, "timeout",
                                 f"not run: the implementation already hung in {timeouts} items")
            else:
                try:
                    status, message, signature = (early.result() if ran_beside
                                                  else _run_item(item_graders, candidate))
                    if signature is not None and signature in first_raised:
                        message = _same_error(message, first_raised[signature], signature)
                    elif signature is not None:
                        first_raised[signature] = item.id
                    result = _result(item, status, message)
                    result.signature = signature
                except WorkerUnavailable as exc:
                    unavailable = exc
                    result = _not_run(item, exc)
                except Exception:  # a bug in a grader, never the candidate's fault
                    broke = True
                    result = _result(item, "error",
                                     "internal grader error: " + traceback.format_exc(limit=-3))
            timeouts += result.status == "timeout"
            results.append(result)
            if on_item:
                on_item(result)
            if exitfirst and result.status != "pass":
                break
    in_rubric = [item.id for item in rubric.track(track)]
    results.sort(key=lambda result: in_rubric.index(result.id))  # whatever order they ran in
    core = [item for item in rubric.track(track) if item.level != rubric_data.PLUS]
    partial = len([r for r in results if r.level != rubric_data.PLUS]) < len(core)
    if not track.levels:  # a track beside the levels: all or nothing, and no tells
        level = track.section if results and all(r.status == "pass" for r in results) else "none"
        return GradeResult(name, None if partial else level, results, [], hidden, broke,
                           track=track.id, partial=partial)
    tells = _tells(rubric, candidate.tells)
    level, capped_by = (None, []) if partial else _level(rubric, results, tells)
    return GradeResult(name, level, results, tells, hidden, broke, capped_by, track.id,
                       partial=partial)


def _implementation_passed(results: list[ItemResult]) -> bool:
    """Whether every item of L4 to L6 graded so far that grades the implementation passed (the
    candidate's own tests are graded apart: they do not hold back L6+, though they cap the level)."""
    return all(r.status == "pass" for r in results
               if r.level != rubric_data.PLUS and r.id != tracks.TESTS_ITEM)


def _start_tests_early(items: list[rubric_data.Item], graders: list[Grader], candidate: Candidate,
                       beside: ThreadPoolExecutor, exitfirst: bool) -> Future | None:
    """Start the candidate's own tests in `beside` when they are to run, so that they run in
    their worker while the other items run in the implementation's (the judge and that worker
    take turns, one core between them). Their outcome is the item's, in its rubric place in the
    result; `on_item` hears of it last.
    Not with `exitfirst`, whose run may end before the item is reached, nor with an
    interviewer's grader for the item, which may use the implementation's worker too. The kata's
    grader runs the tests against the bundled reference and mistakes only, never the
    candidate's implementation: no other item's outcome changes theirs."""
    own = [g for g in graders if g.item == tracks.TESTS_ITEM]
    interviewers = set(own) - {*kata_graders(False), *kata_graders(True)}
    if exitfirst or tracks.TESTS_ITEM not in {item.id for item in items} or interviewers:
        return None
    return beside.submit(_run_item, own, candidate)


def _result(item: rubric_data.Item, status: str, message: str,
            unavailable: str | None = None) -> ItemResult:
    return ItemResult(item.id, item.level, status, item.points if status == "pass" else 0.0,
                      item.points, message, unavailable)


def _not_run(item: rubric_data.Item, exc: WorkerUnavailable) -> ItemResult:
    """An item the worker could not run. The worker's reasons read "<what happened>: <detail>";
    the message keeps what happened, `unavailable` the whole reason in one line."""
    reason = _one_line(exc.reason)
    return _result(item, exc.status, "not run: " + reason.split(":", 1)[0], reason)


def _one_line(reason: str) -> str:
    """`reason` in one line. A SyntaxError arrives as Python prints it (`File "...", line N`, the
    source line, a caret, the error); its one line is what happened, the error, file and line."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    where = re.search(r'File "(?:.*/)?(.*)", line (\d+)', lines[0]) if lines else None
    if where is None:
        return " ".join(lines)
    return f"{lines[0].split(':', 1)[0]}: {lines[-1]} ({where[1]}, line {where[2]})"


def _run_item(graders: list[Grader],
              candidate: Candidate) -> tuple[str, str, tuple[str, str, str] | None]:
    """The item's status and message, and the signature of the candidate's exception that made
    it an error (its type, message and place in the candidate's file), if one did."""
    if not graders:
        return "not_attempted", "no grader for this item in this version of the kata", None
    messages = []
    for grader in graders:
        prefix = "hidden case: " if grader.hidden else ""
        try:
            messages.append(prefix + grader.grade(candidate))
        except Fail as exc:
            return "fail", prefix + str(exc), None
        except NotAttempted as exc:
            return "not_attempted", str(exc), None
        except CandidateTimeout as exc:
            return "timeout", prefix + str(exc), None
        except CandidateError as exc:
            return "error", prefix + str(exc), exc.signature
    return "pass", "; ".join(messages), None


def _same_error(message: str, first: str, signature: tuple[str, str, str]) -> str:
    """An item's error message when an earlier item already failed on the same exception: said
    once, there, whole; here, the item's own words up to the call, and the item to read. One
    bug that breaks many items is reported as one."""
    kind, _, where = signature
    call = message.split(f" raised {kind}:", 1)[0]
    return f"{call} raised the same error as {first} ({kind}{where})"


def _tells(rubric: rubric_data.Rubric, seen: list[Tell]) -> list[TellResult]:
    results = []
    for info in rubric.tells:
        observations = [t for t in seen if t.id == info.id]
        detected = [t for t in observations if t.detected]
        if detected:
            results.append(TellResult(info.id, True, detected[0].message))
        elif observations:
            results.append(TellResult(info.id, False, observations[0].message))
        else:
            results.append(TellResult(info.id, False, "not checked: the item that looks for it "
                                      "did not run", checked=False))
    return results


def _level(rubric: rubric_data.Rubric, results: list[ItemResult],
           tells: list[TellResult]) -> tuple[str, list[str]]:
    """The level and the tells that capped it. The items reach the highest level whose items, and
    every lower level's, all pass; a detected tell caps that at its level. The tells returned are
    those whose cap is the level given, below the one reached (none when no cap lowered it)."""
    reached = None
    for level in rubric.levels:
        upto = [r for r in results if rubric.levels.index(r.level) <= rubric.levels.index(level)]
        graded_here = any(r.level == level for r in results)
        if not graded_here or not all(r.status == "pass" for r in upto):
            break
        reached = level
    if reached is None:
        return "below L4", []
    caps = {t.id: rubric.tell(t.id).caps for t in tells if t.detected}
    level = min([reached, *caps.values()], key=rubric.levels.index)
    return level, [tell for tell, cap in caps.items() if cap == level != reached]
