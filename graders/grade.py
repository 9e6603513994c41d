"""Grade one implementation: run every item's graders, then apply the rubric.

The judge's side of a grade. It starts the workers first (their torch import overlaps the judge's),
runs each rubric item's graders in rubric order, turns what happened into a status, and works out
the level: the highest level whose items, and every lower level's, all pass, capped by the tells.
"""

from __future__ import annotations

import importlib.util
import traceback
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Callable

import torch

from graders import rubric as rubric_data
from graders.rubric import SERVING
from graders.candidate import (Candidate, CandidateError, CandidateTimeout, Fail, NotAttempted, Tell)
from graders.isolation import Sandbox
from graders.workers import Worker, WorkerUnavailable

GRADERS_DIR = Path(__file__).resolve().parent
PUBLIC = GRADERS_DIR / "items"
HIDDEN = GRADERS_DIR / "hidden"
DEFAULT_TIMEOUT = 10.0
DEFAULT_IMPORT_TIMEOUT = 60.0  # a correct file may import a large library: transformers takes 8-27 s cold
MAX_TIMEOUTS = 3


@dataclass(frozen=True)
class Track:
    """What a track grades: the module name the candidate's file is imported as, and the names
    its contract requires."""

    module: str
    names: tuple[str, ...]


TRACKS = {
    "dense": Track("kv_cache", ("KVCache", "append", "attend", "reset", "release", "decode_step",
                                "apply_rope", "reorder", "fork")),
    SERVING: Track("paged_kv_cache", ("CacheFull", "PagedKVCache")),
}


@dataclass
class ItemResult:
    id: str
    level: str
    status: str  # pass | fail | error | timeout | not_attempted
    points: float
    max_points: float
    message: str


@dataclass
class TellResult:
    id: str
    detected: bool
    message: str


@dataclass
class GradeResult:
    implementation: str
    level: str
    items: list[ItemResult]
    tells: list[TellResult]
    hidden: bool
    grader_broke: bool = False
    caps: list[str] = field(default_factory=list)
    track: str = "dense"
    isolation: str = "process"  # how the candidate's code was isolated: "bwrap" or "process"

    @property
    def score(self) -> float:
        return sum(i.points for i in self.items)

    @property
    def max_score(self) -> float:
        return sum(i.max_points for i in self.items)

    @property
    def passed(self) -> bool:
        return all(i.status == "pass" for i in self.items)

    def exit_code(self) -> int:
        if self.grader_broke:
            return 4
        return 0 if self.passed else 1


@dataclass(frozen=True)
class Grader:
    item: str
    grade: Callable[[Candidate], str]
    hidden: bool


@cache
def load_graders(folder: Path, hidden: bool) -> tuple[Grader, ...]:
    """Every `*.py` in `folder` that defines ITEM and grade(candidate); loaded once a process."""
    graders = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        name = f"kata_graders_{'hidden' if hidden else 'public'}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        graders.append(Grader(module.ITEM, module.grade, hidden))
    return tuple(graders)


def grade(implementation: Path, tests: Path | None = None, *, track: str = "dense",
          hidden: bool = False, extra_graders: Path | None = None, only: set[str] | None = None,
          up_to: str | None = None, exitfirst: bool = False, timeout: float = DEFAULT_TIMEOUT,
          import_timeout: float = DEFAULT_IMPORT_TIMEOUT, sandbox: Sandbox = Sandbox(),
          on_item: Callable[[ItemResult], None] | None = None) -> GradeResult:
    """Grade `implementation` (and the candidate's `tests`, when given) against the rubric.

    `track` is "dense" (the levels L4-L6) or "serving" (the paged cache of contract section 4;
    it has no own-tests item, so `tests` are not run). `hidden` adds graders/hidden/ and `extra_graders` (an interviewer's own folder of graders,
    judged as hidden). `only` selects item ids, `up_to` the items up to a level; `exitfirst`
    stops after the first item that does not pass (the rest are left out of the result).
    Sets this process's torch to one thread: the judge's tensors are tiny, and a thread pool
    only adds overhead (and spin-waits on a busy machine).
    """
    contract = TRACKS[track]
    worker = Worker("implementation", str(implementation), import_timeout=timeout,
                    module=contract.module, names=contract.names).start()
    test_worker = Worker("tests").start() if tests and track == "dense" else None
    torch.set_num_threads(1)
    rubric = rubric_data.load()
    items = [i for i in rubric.track(track) if (only is None or i.id in only) and (
        up_to is None or track == SERVING
        or rubric.levels.index(i.level) <= rubric.levels.index(up_to))]
    graders = list(load_graders(PUBLIC, hidden=False))
    if hidden:
        graders += load_graders(HIDDEN, hidden=True)
    if extra_graders is not None:
        graders += load_graders(extra_graders, hidden=True)
    try:
        return _grade(Candidate(worker, timeout, tests, test_worker), str(implementation),
                      items, graders, hidden or extra_graders is not None, exitfirst, on_item,
                      track)
    finally:
        worker.close()
        if test_worker:
            test_worker.close()


def _grade(candidate: Candidate, name: str, items: list[rubric_data.Item], graders: list[Grader],
           hidden: bool, exitfirst: bool, on_item: Callable[[ItemResult], None] | None,
           track: str) -> GradeResult:
    rubric = rubric_data.load()
    results, broke, unavailable, timeouts = [], False, None, 0
    for item in items:
        item_graders = [g for g in graders if g.item == item.id]
        if unavailable is not None:
            status, message = unavailable.status, unavailable.reason
        elif timeouts >= MAX_TIMEOUTS:
            status, message = "timeout", f"not run: the implementation already hung in {timeouts} items"
        else:
            try:
                status, message = _run_item(item_graders, candidate)
            except WorkerUnavailable as exc:
                unavailable = exc
                status, message = exc.status, exc.reason
            except Exception:  # a bug in a grader, never the candidate's fault
                broke = True
                status, message = "error", "internal grader error: " + traceback.format_exc(limit=-3)
        timeouts += status == "timeout"
        result = ItemResult(item.id, item.level, status, item.points if status == "pass" else 0.0,
                            item.points, message)
        results.append(result)
        if on_item:
            on_item(result)
        if exitfirst and status != "pass":
            break
    if track == SERVING:  # a track beside the levels: all or nothing, and no tells
        level = SERVING if results and all(r.status == "pass" for r in results) else "none"
        return GradeResult(name, level, results, [], hidden, broke, [], track)
    tells = _tells(rubric, candidate.tells)
    caps = [rubric.tell(t.id).caps for t in tells if t.detected]
    return GradeResult(name, _level(rubric, results, caps), results, tells, hidden, broke, caps,
                       track)


def _run_item(graders: list[Grader], candidate: Candidate) -> tuple[str, str]:
    if not graders:
        return "not_attempted", "no grader for this item in this version of the kata"
    messages = []
    for grader in graders:
        prefix = "hidden case: " if grader.hidden else ""
        try:
            messages.append(prefix + grader.grade(candidate))
        except Fail as exc:
            return "fail", prefix + str(exc)
        except NotAttempted as exc:
            return "not_attempted", str(exc)
        except CandidateTimeout as exc:
            return "timeout", prefix + str(exc)
        except CandidateError as exc:
            return "error", prefix + str(exc)
    return "pass", "; ".join(messages)


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
            results.append(TellResult(info.id, False, "not checked: the item that looks for it did not run"))
    return results


def _level(rubric: rubric_data.Rubric, results: list[ItemResult], caps: list[str]) -> str:
    reached = None
    for level in rubric.levels:
        upto = [r for r in results if rubric.levels.index(r.level) <= rubric.levels.index(level)]
        graded_here = any(r.level == level for r in results)
        if not graded_here or not all(r.status == "pass" for r in upto):
            break
        reached = level
    if reached is not None and caps:
        cap = min(caps, key=rubric.levels.index)
        reached = min(reached, cap, key=rubric.levels.index)
    return reached or "below L4"
