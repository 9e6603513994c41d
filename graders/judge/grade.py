"""Grade one implementation: run every item's graders, then apply the rubric.

The judge's side of a grade. It takes a request (graders.judge.request) and the workers started
for it (by the caller, so that their torch import overlaps the judge's), runs each rubric item's
graders in rubric order, turns what happened into a status, and works out the level: the
highest level whose items, and every lower level's, all pass, capped by the tells. A run that
leaves items out is partial and has no level. The L6+ items are graded last, and only once
every item before them passed (else they are not attempted); a run without them is not partial.
The real-model item's runs start with the grade, in workers of their own, and its outcome is
taken in its turn (or its runs ended, when it is not graded after all).
"""

from __future__ import annotations

import contextvars
import importlib
import importlib.util
import pkgutil
import re
import secrets
import sys
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Callable, Mapping

import torch

from graders.judge.candidate import Candidate
from graders.judge.isolation import reap_strays
from graders.judge.request import GradeRequest
from graders.judge.result import GradeResult, ItemResult, Status
from graders.judge.similarity import similarity
from graders.judge.workers import Budget, GradeWorkers, WorkerUnavailable
from graders.shared import hidden_cases, tracks
from graders.shared import rubric as rubric_data
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted

MAX_TIMEOUTS = 3
# An L6+ item's message when an item before it did not pass: the follow-ups past L6 start there.
BEFORE_PLUS = "not started: L6+ is graded once every item of L4 to L6 passes (own tests aside)"
# The items that run from the grade's start in workers of their own (`_start_beside`).
BESIDE = (tracks.TESTS_ITEM, tracks.MODEL_ITEM)


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
    found = sorted(
        (info.name, track.items)
        for track in tracks.TRACKS.values()
        for info in pkgutil.iter_modules(importlib.import_module(track.items).__path__)
        if not info.name.startswith("_")
    )
    modules = [importlib.import_module(f"{package}.{name}") for name, package in found]
    if hidden:
        return tuple(
            Grader(m.ITEM, m.grade_hidden, True) for m in modules if hasattr(m, "grade_hidden")
        )
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
            raise PrivateGraderError(
                f"{path}: ITEM {item!r} is not an item of the {track.id} "
                "track (kata rubric lists them)"
            )
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


def grade(
    request: GradeRequest,
    workers: GradeWorkers,
    on_item: Callable[[ItemResult], None] | None = None,
    kept: Mapping[str, ItemResult] | None = None,
) -> GradeResult:
    """Grade `request` (graders.judge.request.GradeRequest) in `workers`, started for it
    (GradeWorkers.start(request), by the caller: before it imports torch, or ahead of the
    grade); the judge uses them and closes them, whatever happens.

    An interviewer's graders that cannot be used raise PrivateGraderError before anything runs.
    A hidden grade draws its cases from the request's seed (graders.shared.hidden_cases), a
    fresh one when it has none; the result records it. The items named `first` run before the
    others, each group in rubric order; `on_item` hears of each as it ends, and the result lists
    them in rubric order. The candidate's own tests run from the start, beside the other items,
    and are heard of last (unless `exitfirst`: then in their turn); so does the real-model item,
    in its own two workers, heard of in its turn, its runs ended where it is not graded. The order changes no item's
    checks or cases (each draws its own, from its own seeds); it decides only which items
    `exitfirst` leaves out, and which the budget of MAX_TIMEOUTS hangs leaves unrun. The items
    not graded when the time budget is spent are timeouts. `kept`: results of items not to run
    again, taken as they are (`kata grade --watch` keeps the real-model item's verdict while
    the implementation's bytes are unchanged).
    Returns only once every process the candidate's code started is gone.
    A hidden run also records how much of the file matches each bundled solution of the track
    (graders.judge.similarity): information for the interviewer, which no status or level uses.
    Sets this process's torch to one thread: the judge's tensors are tiny, and a thread pool
    only adds overhead (and spin-waits on a busy machine).
    """
    track, hidden = request.track, request.judged_hidden
    try:
        graders = _graders(request.hidden, request.extra_graders, track)
        spent = Budget.starting_now(request.budget.seconds(hidden))
        seed = (request.seed if request.seed is not None else draw_seed()) if hidden else None
        path = Path(request.implementation).absolute()
        # Read before the candidate's code runs: in the process fallback it can rewrite its file.
        borrowed = similarity(path, track) if hidden else None
        items = _run_order(request.items, request.first)
        workers.limit_to(spent)
        torch.set_num_threads(1)
        with hidden_cases.run_seed(seed) if hidden else nullcontext():
            candidate = Candidate(
                workers.implementation,
                request.timeout,
                workers.tests,
                workers.test_worker,
                workers.model,
                workers.reference,
            )
            results, broke = _run_items(
                candidate, items, graders, request.exitfirst, on_item, spent, kept or {}
            )
    finally:
        workers.close()
        reap_strays()  # nothing the candidate started outlives the grade
    return GradeResult.from_items(
        str(request.implementation),
        track,
        results,
        candidate.tells,
        hidden=hidden,
        grader_broke=broke,
        isolation=workers.isolation,
        seed=seed,
        similarity=borrowed,
    )


def draw_seed() -> int:
    """A fresh seed for a hidden run: from the OS, never the same twice in practice, so no one
    can read the cases ahead of the run."""
    return secrets.randbelow(10**7)


def _run_order(items: list[rubric_data.Item], first: frozenset[str]) -> list[rubric_data.Item]:
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


def _run_items(
    candidate: Candidate,
    items: list[rubric_data.Item],
    graders: list[Grader],
    exitfirst: bool,
    on_item: Callable[[ItemResult], None] | None,
    spent: Budget,
    kept: Mapping[str, ItemResult],
) -> tuple[list[ItemResult], bool]:
    """Each item's outcome, in the order run (those in `kept` taken as they are), and whether a
    grader broke. The items of `BESIDE` run from the start in workers of their own; the
    real-model item's runs, when it is not graded after all, end as soon as that is known."""
    with ThreadPoolExecutor(len(BESIDE)) as beside:
        early = _start_beside(items, graders, candidate, beside, exitfirst, kept)
        try:
            return _take_items(candidate, items, graders, exitfirst, on_item, spent, kept, early)
        finally:
            if tracks.MODEL_ITEM in early and not early[tracks.MODEL_ITEM].done():
                candidate.abandon_model()


def _take_items(
    candidate: Candidate,
    items: list[rubric_data.Item],
    graders: list[Grader],
    exitfirst: bool,
    on_item: Callable[[ItemResult], None] | None,
    spent: Budget,
    kept: Mapping[str, ItemResult],
    early: Mapping[str, Future],
) -> tuple[list[ItemResult], bool]:
    """`_run_items` in the judge's thread: each item run in its turn, or its outcome taken
    from `early` (the candidate's own tests last, once the other items are done)."""
    results, broke, unavailable, timeouts = [], False, None, 0
    first_raised: dict[tuple, str] = {}  # an exception's signature -> the first item it failed
    if tracks.TESTS_ITEM in early:
        items = sorted(items, key=lambda item: item.id == tracks.TESTS_ITEM)
    items = sorted(items, key=lambda item: item.level == rubric_data.PLUS)  # L6+ after all
    for item in items:
        item_graders = [g for g in graders if g.item == item.id]
        ran_beside = item.id in early
        if item.id in kept:
            result = kept[item.id]
        elif item.level == rubric_data.PLUS and not _implementation_passed(results):
            result = _result(item, "not_attempted", BEFORE_PLUS)
        elif unavailable is not None:
            result = _not_run(item, unavailable)
        elif spent.spent() and not ran_beside:
            result = _result(item, "timeout", f"not run: {spent.message()}")
        elif timeouts >= MAX_TIMEOUTS and not ran_beside:  # hangs of the implementation
            result = _result(
                item, "timeout", f"not run: the implementation already hung in {timeouts} items"
            )
        else:
            try:
                status, message, signature = (
                    early[item.id].result() if ran_beside else _run_item(item_graders, candidate)
                )
                if signature is not None and signature in first_raised:
                    message = _same_error(message, first_raised[signature], signature)
                elif signature is not None:
                    first_raised[signature] = item.id
                result = _result(item, status, message, signature=signature)
            except WorkerUnavailable as exc:
                unavailable = exc
                result = _not_run(item, exc)
            except Exception:  # a bug in a grader, never the candidate's fault
                broke = True
                result = _result(
                    item, "error", "internal grader error: " + traceback.format_exc(limit=-3)
                )
        timeouts += result.status == "timeout"
        results.append(result)
        if on_item:
            on_item(result)
        if exitfirst and not result.passed:
            break
    return results, broke


def _implementation_passed(results: list[ItemResult]) -> bool:
    """Whether every item of L4 to L6 graded so far that grades the implementation passed (the
    candidate's own tests are graded apart: they do not hold back L6+, though they cap the level)."""
    return all(
        r.status == "pass"
        for r in results
        if r.level != rubric_data.PLUS and r.id != tracks.TESTS_ITEM
    )


def _start_beside(
    items: list[rubric_data.Item],
    graders: list[Grader],
    candidate: Candidate,
    beside: ThreadPoolExecutor,
    exitfirst: bool,
    kept: Mapping[str, ItemResult],
) -> dict[str, Future]:
    """Start in `beside` each item of `BESIDE` that is to run, so that it runs in its workers
    while the other items run in the implementation's (the judge and that worker take turns,
    one core between them); each outcome is taken in the item's turn (`_take_items`).

    The candidate's own tests: the kata's grader runs them against the bundled reference and
    mistakes only, never the candidate's implementation. The real-model item: its runs go to
    its own two workers (the implementation beside transformers, and DynamicCache), and its
    outcome is taken only if every item before L6+ passes; no other item's outcome changes
    either's. Neither starts with `exitfirst` (the run may end before the item is reached),
    when the item's outcome is `kept`, or with an interviewer's grader for it, which may use
    the implementation's worker too. Each runs in a copy of this thread's context: a hidden
    grade's seed (graders.shared.hidden_cases) is the same there."""
    wanted = {item.id for item in items} - set(kept)
    kata = {*kata_graders(False), *kata_graders(True)}
    early = {}
    for item_id in BESIDE:
        own = [g for g in graders if g.item == item_id]
        if exitfirst or item_id not in wanted or set(own) - kata:
            continue
        early[item_id] = beside.submit(contextvars.copy_context().run, _run_item, own, candidate)
    return early


def _result(
    item: rubric_data.Item,
    status: Status,
    message: str,
    unavailable: str | None = None,
    signature: tuple[str, str, str] | None = None,
) -> ItemResult:
    return ItemResult(
        item.id,
        item.level,
        status,
        item.points if status == "pass" else 0.0,
        item.points,
        message,
        unavailable,
        signature,
    )


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


def _run_item(
    graders: list[Grader], candidate: Candidate
) -> tuple[Status, str, tuple[str, str, str] | None]:
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
