"""The scriptable verbs of `kata interview` (contract section 7): start, save, hint, end. The
interactive verb (graders.interview.commands) is made of them, so a session can be driven by a
script or a test with no terminal; `clock` (seconds since the epoch) is theirs to set.

Stages: the dense track opens L4, then L5 once every L4 item passes, then L6 once every L5 item
does, then L6+ (contract section 8) once L6 is reached (after the tells' caps: a save must
*reach* the stage's level). A save is graded on the
public cases of the items of the stages opened so far; the save that completes a level opens the
next stage, and the next save is graded with its items too. Other tracks are a single stage.

Every change to the record is a read-modify-write under `_editing` (a flock), so a hint asked
from another terminal while the interactive verb watches is never lost; the session itself (who
saves and ends) is held by record.locked, one process at a time.
"""

from __future__ import annotations

import fcntl
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from graders.interview import record
from graders.judge.request import GradeRequest
from graders.judge.result import GradeResult, level
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.tracks import DENSE

Clock = Callable[[], float]


class NoSession(Exception):
    """The workspace has no session record (or no workspace); the message is one line."""


class Refused(Exception):
    """Something the session does not allow now (a hint in a strict session, a save after time
    up); it has been recorded where the contract says so. The message is one line."""


class Interrupted(Exception):
    """The final grade was interrupted (Ctrl-C): the session has ended all the same, with the
    items graded before the interrupt as its `final` (a partial hidden grade), recorded.
    `record` is the session's record; the message is one line."""

    def __init__(self, message: str, session: dict):
        super().__init__(message)
        self.record = session


@dataclass
class Saved:
    """What `save` did. `event` is the save event recorded (None: nothing changed since the last
    snapshot graded at this stage); `opened` the stage the save opened, if any; `result` the
    graders.judge.result.GradeResult (None when nothing was graded)."""

    event: dict | None
    opened: str | None
    result: object | None
    record: dict


def files(workspace: Path, track: tracks.Track) -> tuple[Path, Path | None]:
    """The implementation and the candidate's test file of `workspace` (None: the track has
    none)."""
    return workspace / track.implementation, (workspace / track.tests if track.tests else None)


def stages(track: tracks.Track) -> tuple[str, ...]:
    """The stages of `track`, in order: the rubric's levels (L6+ included: it opens once L6 is
    reached), or the track's one section."""
    return rubric_data.load().levels if track.levels else (track.section,)


def stage_items(track: tracks.Track, stage: str) -> list[str]:
    """The ids of the items a save is graded on once `stage` is open: those of its level and
    every level before it (every item of a track without levels)."""
    up_to = stage if track.levels else None
    return [item.id for item in rubric_data.selected(track, None, up_to)]


def added_items(track: tracks.Track, stage: str) -> list[rubric_data.Item]:
    """The items `stage` adds to the ones before it."""
    return [item for item in rubric_data.load().track(track) if item.level == stage]


def questions(stage: str) -> list[rubric_data.InterviewerItem]:
    """The conceptual questions asked when `stage` opens: the rubric's interviewer-only items of
    that level."""
    return [item for item in rubric_data.load().interviewer if item.level == stage]


def asked(session: dict) -> list[rubric_data.InterviewerItem]:
    """Every conceptual question asked so far: those of the stages opened, in rubric order."""
    track = tracks.get(session["track"])
    opened = stages(track)[: stages(track).index(session["stage"]) + 1]
    return [item for stage in opened for item in questions(stage)]


def elapsed(session: dict, now: float) -> float:
    """Seconds since the session started."""
    return now - record.epoch(session["started"])


def time_left(session: dict, now: float) -> float:
    """Seconds left on the clock (0 at time up, never below)."""
    return max(0.0, session["minutes"] * 60 - elapsed(session, now))


def start(
    workspace: Path,
    *,
    minutes: float = 60,
    strict: bool = False,
    track: tracks.Track = DENSE,
    clock: Clock = time.time,
) -> tuple[dict, list[Path], bool]:
    """Start a session in `workspace`, or resume the one there: (the record, the files made,
    whether it resumed). A folder without the track's file is made a workspace as `kata init`
    makes one (FileExistsError, nothing written, when it holds some of a workspace's files but
    not the implementation). A resumed session keeps its own minutes, strictness and track.
    SessionBusy when another live process holds the session."""
    from graders.workflows.workspace import init_workspace

    made = []
    if not files(workspace, track)[0].is_file():
        made = init_workspace(workspace)
    with record.locked(workspace), _editing(workspace):
        session = _load(workspace)
        if session is not None:
            return session, made, True
        session = record.new(track.id, minutes, strict, clock(), stages(track)[0])
        record.save(workspace, session)
    write_answers(workspace, session)
    return session, made, False


def load(workspace: Path) -> dict:
    """The workspace's record; NoSession when there is none, ValueError (one line naming the
    field: graders.interview.schema) for one that is not a record."""
    session = _load(workspace)
    if session is None:
        raise NoSession(
            f"no interview session in {workspace}: start one with `kata interview start DIR`"
        )
    return session


def _load(workspace: Path) -> dict | None:
    """The workspace's record checked against its schema; None when there is none."""
    from graders.interview import schema

    data = record.load(workspace)
    return None if data is None else schema.check(data, str(record.path(workspace)), stages, ranks)


def save(
    workspace: Path, *, clock: Clock = time.time, sandbox=None, workers=None, own_tests=None
) -> Saved:
    """What a watched save does: snapshot the files, grade them on the items of the stages
    opened so far, record the save (and the stage it opens). Nothing is recorded when the files
    are those of the last snapshot and no stage has opened since it was graded. After time up,
    the save is refused and the session ended (Refused, once `end` has run). `workers`: started
    ahead for these files (graders.judge.workers.GradeWorkers), else started here; closed either
    way. `own_tests`: the interactive verb's graders.interview.warm.OwnTestsVerdict, kept across
    its saves: a save whose test file is the one it holds the verdict of takes that verdict
    instead of running the item again, and a save that runs the item leaves its verdict there.
    SessionBusy when another live process holds the session."""
    try:
        return _save(workspace, clock, sandbox, workers, own_tests)
    except BaseException:
        _close(workers)
        raise


def _save(workspace: Path, clock: Clock, sandbox, workers, own_tests) -> Saved:
    """`save`'s work; it closes `workers` itself on each way out that grades nothing."""
    from graders.judge.grade import grade
    from graders.judge.workers import GradeWorkers

    with record.locked(workspace):
        session = load(workspace)
        if session["ended"] is not None:
            _close(workers)
            raise Refused("the session has ended: no more saves (`kata interview report DIR`)")
        if time_left(session, clock()) <= 0:
            _close(workers)
            end(workspace, clock=clock, sandbox=sandbox)
            raise Refused("time is up: the save was not graded, and the session has ended")
        track = tracks.get(session["track"])
        contents = _contents(workspace, track)
        if not _changed(session, contents):
            _close(workers)
            return Saved(None, None, None, session)
        name = record.snapshot(workspace, contents)
        implementation, tests = files(record.folder(workspace) / name, track)
        tests = tests if tests and tests.is_file() else None
        request = GradeRequest(
            implementation,
            tests,
            track=track,
            only=frozenset(stage_items(track, session["stage"])),
            sandbox=sandbox or default_sandbox(),
        )
        kept = own_tests is not None and request.runs_tests and own_tests.covers(tests)
        if kept:
            request = replace(request, only=request.only - {tracks.TESTS_ITEM})
        if workers is not None and not workers.fits(request):
            workers = _close(workers)  # started for other files: the grade starts its own
        result = grade(request, workers or GradeWorkers.start(request))
        if kept:
            result = own_tests.fill(result)
        elif own_tests is not None:
            own_tests.keep(result, tests, name)
        level = reached(result, track)
        opened = None

        def add(session: dict) -> None:
            nonlocal opened
            t = _t(session, clock())
            session["events"].append(
                {
                    "t": t,
                    "kind": "save",
                    "snapshot": name,
                    "level": level,
                    "score": result.score,
                    "passing": [i.id for i in result.items if i.passed],
                }
            )
            order = stages(track)
            if level == session["stage"] and order.index(level) + 1 < len(order):
                opened = session["stage"] = order[order.index(level) + 1]
                session["events"].append({"t": t, "kind": "stage", "stage": opened})

        session = update(workspace, add)
    if opened:
        write_answers(workspace, session)
    return Saved(session["events"][-2 if opened else -1], opened, result, session)


def ranks(track: tracks.Track) -> list[str]:
    """The levels a save of `track` can reach (`reached`), lowest first."""
    return ["below L4", *rubric_data.load().levels] if track.levels else ["none", track.section]


def reached(result, track: tracks.Track) -> str:
    """The level a save's grade reaches on the items it graded (the stages opened so far), after
    the tells' caps: the contract's rule for a level (graders.judge.result.level), applied to
    those items."""
    return level(track, result.items, result.tells)[0]


def hint(workspace: Path, item: str, step: int, *, clock: Clock = time.time) -> None:
    """Record hint `step` of `item`, asked in the workspace's live session; in a strict session
    record the refusal instead and raise Refused. Nothing when the workspace has no session, or
    its session has ended. KeyError for an item the rubric lacks (nothing recorded)."""
    from graders.workflows.hints import hint as hint_for

    hint_for(item, step)
    _ask(workspace, "hint", item, clock, {"step": step})


def solution(workspace: Path, name: str, *, clock: Clock = time.time) -> None:
    """A reference solution asked for inside the workspace's live session (`name`: a solution,
    "FROM -> TO" for a diff of two, "readme" for their story): recorded as hints are
    (`{"kind": "solution", "item": name}`); in a strict session refused, and the refusal
    recorded (Refused). Nothing when the workspace has no session, or its session has ended."""
    _ask(workspace, "solution", name, clock, {})


def asked_from(
    folder: Path, what: str, name: str, step: int = 1, *, clock: Clock = time.time
) -> None:
    """A hint (`what` "hint": item `name`, `step`) or a solution (`what` "solution") asked by a
    command run in `folder`: inside a session's workspace (the folder itself or any folder
    under it), recorded, or refused (Refused) in a strict session, as `hint` and `solution`
    do. Nothing outside every session's workspace. cli.py's `kata hint` and `kata solution`
    (each of its forms) call this before they show anything."""
    workspace = next(
        (place for place in (folder, *folder.parents) if record.path(place).is_file()), None
    )
    if workspace is None:
        return
    if what == "hint":
        hint(workspace, name, step, clock=clock)
    else:
        solution(workspace, name, clock=clock)


def end(workspace: Path, *, clock: Clock = time.time, sandbox=None) -> dict:
    """End the session: the last snapshot (one is taken if there is none) graded in full with
    the hidden cases, as `final`, and the time it ended. Idempotent: an ended session's record
    is returned as it is. SessionBusy when another live process holds the session.

    A Ctrl-C during the final grade ends the session with the items graded so far: `final` is
    their partial hidden grade (its seed kept, to grade the snapshot again in full), recorded
    with Ctrl-C ignored until the record is written; then Interrupted."""
    from graders.judge.grade import draw_seed, grade
    from graders.judge.workers import GradeWorkers

    with record.locked(workspace):
        session = load(workspace)
        if session["ended"] is not None:
            return session
        track = tracks.get(session["track"])
        saves = [e for e in session["events"] if e["kind"] == "save"]
        name = (
            saves[-1]["snapshot"]
            if saves
            else record.snapshot(workspace, _contents(workspace, track))
        )
        implementation, tests = files(record.folder(workspace) / name, track)
        seed, done = draw_seed(), []
        request = GradeRequest(
            implementation,
            tests if tests and tests.is_file() else None,
            track=track,
            hidden=True,
            seed=seed,
            sandbox=sandbox or default_sandbox(),
        )
        try:
            result = grade(request, GradeWorkers.start(request), on_item=done.append)
        except KeyboardInterrupt:
            with _interrupts_ignored():
                total = len(rubric_data.load().track(track))
                session = _ended(
                    workspace, name, _partial(implementation, track, done, seed), clock()
                )
            raise Interrupted(
                f"the final grade was interrupted (Ctrl-C) after {len(done)} of "
                f"{total} items: the session ends with those, recorded",
                session,
            ) from None
        return _ended(workspace, name, result, clock())


def _partial(implementation: Path, track: tracks.Track, done: list, seed: int):
    """The final grade interrupted: a partial hidden grade (graders.judge.result.GradeResult) of
    the items `done`, in rubric order; no level, no tells (their items may not have run), and
    no isolation (the workers' were not heard of): null in the record."""
    return GradeResult.from_items(
        str(implementation), track, done, None, hidden=True, isolation=None, seed=seed
    )


def _ended(workspace: Path, name: str, result, ended: float) -> dict:
    """Record the session's end at `ended` with `result`, the final grade of snapshot `name`."""
    from graders.formats.report import to_json

    result = replace(
        result, implementation=f"{name}/{tracks.get(load(workspace)['track']).implementation}"
    )

    def close(session: dict) -> None:
        session["ended"] = record.iso(ended)
        session["final"] = to_json(result)

    return update(workspace, close)


@contextmanager
def _interrupts_ignored():
    """Within the block, Ctrl-C (SIGINT) is ignored: a record is being written, and nothing is
    left to interrupt. Nothing changes outside the main thread, where Python takes no signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def update(workspace: Path, change: Callable[[dict], None]) -> dict:
    """Read the record, `change` it, write it back atomically, under the edit lock; return it."""
    with _editing(workspace):
        session = load(workspace)
        change(session)
        record.save(workspace, session)
    return session


def write_answers(workspace: Path, session: dict) -> Path:
    """DIR/answers.md: one `## <id>` heading for each question asked so far, with the question
    under it. The candidate's answers under each heading are kept, byte for byte whatever their
    encoding (bytes that are not UTF-8 travel as surrogate escapes); headings of questions newly
    asked are added at the end. Questions of stages not yet open are never written."""
    answers = workspace / "answers.md"
    text = (
        answers.read_bytes().decode("utf-8", "surrogateescape")
        if answers.exists()
        else (
            "# Your answers\n\nAnswer each question under its heading, in a few sentences, as you "
            "would say it aloud.\nThe session ends by showing each answer beside a model answer.\n"
        )
    )
    from graders.interview.questions import QUESTIONS

    for item in asked(session):
        if f"\n## {item.id}\n" not in f"\n{text}":
            text = text.rstrip("\n") + f"\n\n## {item.id}\n\n_{QUESTIONS[item.id]}_\n\n"
    answers.write_bytes(text.encode("utf-8", "surrogateescape"))
    return answers


def answers(workspace: Path) -> dict[str, str]:
    """The candidate's answers in DIR/answers.md, by question id: the text under each `## <id>`
    heading, the question's own line left out ("" when not answered, or no file). Bytes that
    are not UTF-8 come as surrogate escapes, which graders.shared.untrusted shows as `\\xNN`."""
    from graders.interview.questions import QUESTIONS

    try:
        text = (workspace / "answers.md").read_bytes().decode("utf-8", "surrogateescape")
    except OSError:
        return {}
    found, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            found[current] = []
        elif current is not None and line.strip() != f"_{QUESTIONS.get(current, '')}_":
            found[current].append(line)
    return {key: "\n".join(lines).strip() for key, lines in found.items()}


def _ask(workspace: Path, what: str, item: str, clock: Clock, fields: dict) -> None:
    """In a live strict session, record the refusal of `what` and raise Refused; in a live
    session otherwise, record the event `what` with `fields`."""
    try:
        session = _load(workspace)
    except ValueError:  # not a record of ours: no session to record in
        return
    if session is None or session["ended"] is not None:
        return
    if session["strict"]:
        update(
            workspace,
            lambda s: s["events"].append(
                {"t": _t(s, clock()), "kind": "refused", "what": what, "item": item}
            ),
        )
        raise Refused(f"this is a strict interview session: no {what}s (the refusal is recorded)")
    update(
        workspace,
        lambda s: s["events"].append({"t": _t(s, clock()), "kind": what, "item": item, **fields}),
    )


@contextmanager
def _editing(workspace: Path):
    """An exclusive flock on DIR/.kata/edit.lock for one read-modify-write of the record."""
    record.folder(workspace).mkdir(exist_ok=True)
    with open(record.folder(workspace) / "edit.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _contents(workspace: Path, track: tracks.Track) -> dict[str, bytes]:
    """The files a snapshot keeps, by name: the implementation, then the tests when present."""
    implementation, tests = files(workspace, track)
    contents = {implementation.name: implementation.read_bytes()}
    if tests is not None and tests.is_file():
        contents[tests.name] = tests.read_bytes()
    return contents


def _changed(session: dict, contents: dict[str, bytes]) -> bool:
    """Whether a save of `contents` is one: the files differ from the last snapshot, or a stage
    has opened since it was graded."""
    last = next((e for e in reversed(session["events"]) if e["kind"] in ("save", "stage")), None)
    if last is None or last["kind"] == "stage":
        return True
    data = list(contents.values())
    digest = record.content_hash(data[0], data[1] if len(data) > 1 else None)
    return not last["snapshot"].endswith(f"-{digest}")


def _t(session: dict, now: float) -> float:
    return round(elapsed(session, now), 1)


def default_sandbox():
    """The sandbox of a session's grades: bubblewrap where it works, else the process fallback
    (the candidate's own files, on the candidate's machine, as `kata grade` takes them)."""
    from graders.judge.isolation import Sandbox

    return Sandbox(mode="auto", chosen=False)


def _close(workers) -> None:
    """Close `workers` (None: nothing to close); None, for `workers = _close(workers)`."""
    if workers is not None:
        workers.close()
