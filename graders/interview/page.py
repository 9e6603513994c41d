"""A session as one HTML page (`kata interview report DIR --html FILE`): what an interviewer
reviews afterwards, alone or with a hiring committee.

The page, top to bottom: what was checked of the record (graders.interview.verify: the snapshots
against their names always; with `--verify` every claim, agrees, DISAGREES or not checked);
the session's facts; its timeline (time across, score up, each save a point coloured by its
level and linking its snapshot; stage openings, hints, solutions and refusals marked); a
control to step through the snapshots; each snapshot with the items graded at that save (pass
or not, and which began or stopped passing at it), what happened since the save
before, its diff from that save (highlighted), its files and its check; the final hidden grade
(graders.formats.grade_page); and each answer beside its model answer.

Without JavaScript every snapshot is on the page, one after the other; the script only steps.
Everything read from the workspace (the record's fields, the snapshots' files, answers.md) is
the candidate's: text on the page, never markup (graders.formats.html.el). A snapshot whose
name is not one the kata makes (NNN-<8 hex>) is named, never read: it could point anywhere; nor
is a file that links outside the session's folder (a candidate's folder could link a snapshot
to the interviewer's key, and the page is made to be shared).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path

from graders.formats.grade_page import grade_section, result_from_json
from graders.formats.html import Html, document, el, join
from graders.interview import record, review, session as verbs, verify
from graders.interview.questions import MODEL_ANSWERS, QUESTIONS
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.untrusted import clip, printable, quote

MAX_FILE_CHARS = 100_000  # of one snapshot's file on the page; a kv_cache.py is 8-20 thousand
WIDTH, HEIGHT = 1200, 240  # the timeline's drawing units (it scales to the page's width)
LEFT, RIGHT, TOP, BOTTOM, LANE = 52, 18, 26, 170, 196  # its plot area and its events' lane
# A claim's check, by the page's colours: agrees green, DISAGREES red, not checked amber.
CHECK_CLASS = {"agrees": "verified", "disagrees": "edited", "unchecked": "written"}


@dataclass
class Snapshot:
    """One save as the page shows it: its event, its number among the saves, its track, the
    stage it was graded at, the items graded and those passing before and after, the events
    since the save before, its files (name: text; None when unchanged since the snapshot
    before), the lines of each that this save wrote or changed, and its diff; the files not
    read, and why; `readable` is False for a snapshot name the kata does not make."""

    event: dict
    index: int
    track: str
    stage: str
    graded: list[str]
    passing: set[str]
    before: set[str]
    since: list[dict] = field(default_factory=list)
    files: dict[str, str | None] = field(default_factory=dict)
    diff: str = ""
    changed: dict[str, set[int]] = field(default_factory=dict)  # file: its lines new here (0-based)
    unread: dict[str, str] = field(default_factory=dict)  # file: why it was not read
    readable: bool = True


def write_html(
    session: dict, workspace: Path, path: Path, checked: verify.Verification | None = None
) -> None:
    from graders.shared.output_files import write_atomically

    write_atomically(path, page(session, workspace, checked))


def page(session: dict, workspace: Path, checked: verify.Verification | None = None) -> str:
    """The session's page, with what was `checked` of the record (None: the snapshots against
    their names, the check every report makes). ValueError, one line, for a final grade the
    kata did not write."""
    checked = checked or verify.unverified(session, workspace)
    track = tracks.get(session["track"])
    shots = snapshots(session, workspace)
    final = None if session["final"] is None else result_from_json(session["final"], track.id)
    body = join(
        el(
            "h1",
            f"Interview session: {track.id}, {session['minutes']:g} minutes",
            " (strict)" if session["strict"] else "",
        ),
        _provenance(session, checked),
        _facts(session),
        el("h2", "Timeline"),
        _timeline(session, shots, track),
        _legend(track),
        el("h2", f"Snapshots ({len(shots)})"),
        _stepper(shots) if shots else el("p", "No save yet: nothing to step through."),
        el(
            "noscript",
            el(
                "p",
                "Without JavaScript every snapshot is shown below, in order; "
                "stepping through them needs it.",
                cls="dim",
            ),
        ),
        [_snapshot(shot, len(shots), shots, checked) for shot in shots],
        el("h2", "Final grade (hidden cases)"),
        _final_check(session, checked),
        grade_section(final)
        if final
        else el("p", "Not yet: the session has not ended (kata interview end DIR)."),
        el("h2", "Conceptual questions"),
        _answers(session, workspace),
    )
    return document(f"Interview session: {track.id}", body)


def snapshots(session: dict, workspace: Path) -> list[Snapshot]:
    """Each save of the record, with the stage it was graded at (the stage open before it),
    the events since the save before (a stage it opened is its own), its files and its diff."""
    track = tracks.get(session["track"])
    stage = verbs.stages(track)[0]
    shots: list[Snapshot] = []
    waiting: list[dict] = []
    for event in session["events"]:
        if event["kind"] == "save":
            before = shots[-1].passing if shots else set()
            shots.append(
                Snapshot(
                    event,
                    len(shots) + 1,
                    track.id,
                    stage,
                    verbs.stage_items(track, stage) if stage in verbs.stages(track) else [],
                    set(event["passing"]),
                    before,
                    since=waiting,
                )
            )
            waiting = []
        elif event["kind"] == "stage":
            stage = event["stage"]
            (shots[-1].since if shots else waiting).append(event)
        else:
            waiting.append(event)
    if shots:
        shots[-1].since += waiting
    previous: dict[str, str] = {}
    for shot in shots:
        _read(shot, workspace, track, previous)
    return shots


def _read(shot: Snapshot, workspace: Path, track: tracks.Track, previous: dict) -> None:
    """Fill `shot`'s files and diff from its folder; `previous` holds the files of the snapshot
    before (name: text) and is left holding this one's."""
    name = str(shot.event["snapshot"])
    if not record.SNAPSHOT.match(name):
        shot.readable = False
        return
    root = os.path.realpath(record.folder(workspace))
    current = {}
    for path in verbs.files(record.folder(workspace) / name, track):
        if path is None or not path.is_file():
            continue
        if not os.path.realpath(path).startswith(root + os.sep):
            shot.unread[path.name] = "a link to a file outside the session's folder: not read"
            continue
        current[path.name] = clip(path.read_bytes().decode("utf-8", "replace"), MAX_FILE_CHARS)
    if previous:
        lines = []
        for file in sorted(set(previous) | set(current)):
            lines += difflib.unified_diff(
                previous.get(file, "").splitlines(),
                current.get(file, "").splitlines(),
                f"before/{file}",
                f"now/{file}",
                lineterm="",
            )
        shot.diff = "\n".join(lines)
    shot.files = {
        file: None if previous.get(file) == source else source for file, source in current.items()
    }
    shot.changed = {
        file: _changed_lines(previous[file], source) if file in previous else set()
        for file, source in current.items()
    }
    previous.clear()
    previous.update(current)


def _provenance(session: dict, checked: verify.Verification) -> Html:
    """What was checked of the record, in the terminal report's words (review.verdict_lines):
    shown as written (no --verify), verified, or edited; the stages' check; the record's word."""
    said = review.verdict_lines(session, checked)
    state = "edited" if checked.edited else "verified" if checked.verified else "written"
    first = (
        el("p", el("b", said[0]))
        if checked.verified  # "Verified: ..." or "EDITED: ..."
        else el("p", el("b", "Shown as written. "), said[0])
    )
    return el(
        "div",
        first,
        [el("p", line) for line in said[1:]],
        el("p", review.stages_line(session, checked)) if checked.verified else None,
        el("p", f"The record's word (no grade checks it): {verify.RECORDS_WORD}.", cls="dim"),
        cls=f"provenance {state}",
    )


def _check_badge(verdict: verify.Verdict, differences: tuple[str, ...] = ()) -> Html:
    """A claim's check as a badge: agrees, DISAGREES or not checked, what differs as its title."""
    return el(
        "span",
        review.MARKS[verdict],
        cls=f"badge {CHECK_CLASS[verdict]}",
        title=review.mark(verdict, differences),
    )


def _name_check(checked: verify.Verification, name: object) -> Html | None:
    """The snapshot `name` against the hash of its files: why it does not match (None when it
    does, or when the record does not name it)."""
    snapshot = checked.snapshot(name)
    if snapshot is None or snapshot.matches:
        return None
    return el("p", el("b", "EDITED: "), snapshot.problem(printable), ".", cls="edited")


def _final_check(session: dict, checked: verify.Verification) -> Html | None:
    """The final grade's check (--verify: graded again with --hidden at the recorded seed), and
    its snapshot against its name."""
    final = session["final"]
    if final is None:
        return None
    check = checked.final
    again = (
        None
        if check is None
        else el(
            "p",
            f"Graded again with --hidden at seed {final['seed']}: "
            + (
                f"{check.graded.level}, {check.graded.score:g} points"
                if check.graded
                else "no snapshot"
            )
            + ": "
            + review.mark(check.verdict, check.differences),
            cls=CHECK_CLASS[check.verdict],
        )
    )
    return join(again, _name_check(checked, str(final["implementation"]).split("/")[0]))


def _facts(session: dict) -> Html:
    found = review.figures(session)
    facts = [
        ("Track", session["track"]),
        ("Started", session["started"]),
        ("Ended", session["ended"] or "still running"),
        ("Stage reached", session["stage"]),
        ("Saves", len(review.saves(session))),
        *((f"Time to {level}", review.clock(t)) for level, t in found["time_to_level"].items()),
        ("Hints", len(found["hints"])),
        ("Solutions read", len(found["solutions"])),
    ]
    if session["strict"]:
        facts.append(("Refused (strict)", len(found["refused"])))
    if found["final"]:
        facts.append(
            (
                "Final",
                f"{found['final']['level'] or 'partial'}, "
                f"{found['final']['score']:g}/{found['final']['max_score']:g}",
            )
        )
    first = el(
        "details",
        el("summary", "First pass of each item"),
        el(
            "table",
            el(
                "tbody",
                [
                    el("tr", el("td", el("code", item)), el("td", review.clock(t), cls="num"))
                    for item, t in found["first_pass"].items()
                ],
            ),
        ),
    )
    return join(
        el("ul", [el("li", el("b", name), str(value)) for name, value in facts], cls="facts"), first
    )


def _timeline(session: dict, shots: list[Snapshot], track: tracks.Track) -> Html:
    """The session drawn: time across (minutes), the score of each save up, its level as its
    colour; stage openings as dashed lines, hints, solutions and refusals on the lane below."""
    order = verbs.ranks(track)
    top_score = max(
        [
            sum(i.points for i in rubric_data.load().track(track)),
            *(float(s.event["score"]) for s in shots),
        ]
    )
    last = max([float(e["t"]) for e in session["events"]], default=0.0)
    ended = verbs.elapsed(session, record.epoch(session["ended"])) if session["ended"] else None
    span = max(60.0, session["minutes"] * 60, last, ended or 0.0)

    def x(t: float) -> float:
        return round(LEFT + float(t) / span * (WIDTH - LEFT - RIGHT), 1)

    def y(score: float) -> float:
        return round(BOTTOM - float(score) / top_score * (BOTTOM - TOP), 1)

    parts = []
    for share in (0, 0.25, 0.5, 0.75, 1):
        parts += [
            el(
                "line",
                x1=LEFT,
                x2=WIDTH - RIGHT,
                y1=y(share * top_score),
                y2=y(share * top_score),
                cls="grid",
            ),
            el(
                "text",
                f"{share * top_score:g}",
                x=LEFT - 6,
                y=y(share * top_score) + 4,
                text_anchor="end",
            ),
        ]
    step = 10 if span > 1800 else 5 if span > 600 else 1
    for minute in range(0, int(span // 60) + 1, step):
        parts.append(
            el("text", f"{minute}m", x=x(minute * 60), y=HEIGHT - 12, text_anchor="middle")
        )
    parts.append(el("line", x1=LEFT, x2=WIDTH - RIGHT, y1=BOTTOM, y2=BOTTOM, cls="axis"))
    parts.append(el("text", "score", x=8, y=TOP - 10))
    parts.append(el("text", "events", x=8, y=LANE + 4))
    if ended is not None:
        right = x(ended) > WIDTH - 80  # the label on the line's left, where the right is short
        parts += [
            el("line", x1=x(ended), x2=x(ended), y1=TOP, y2=LANE + 8, cls="end"),
            el(
                "text",
                "ended",
                x=x(ended) + (-4 if right else 4),
                y=TOP - 10,
                text_anchor="end" if right else "start",
            ),
        ]
    stages = [event for event in session["events"] if event["kind"] == "stage"]
    for row, event in enumerate(stages):
        # Labels of stages opened close together stand on rows of their own.
        parts += [
            el("line", x1=x(event["t"]), x2=x(event["t"]), y1=TOP - 4, y2=BOTTOM, cls="stage"),
            el(
                "text",
                f"{event['stage']} opens",
                x=x(event["t"]) + 4,
                y=TOP + 8 + 13 * (row % 3),
                cls="stage-label",
            ),
        ]
    for event in session["events"]:
        if event["kind"] in ("hint", "solution", "refused"):
            parts.append(_mark(event, x(event["t"])))
    points = [(x(0), y(0))]
    for shot in shots:
        points += [
            (x(shot.event["t"]), points[-1][1]),
            (x(shot.event["t"]), y(shot.event["score"])),
        ]
    points.append((x(ended if ended is not None else last), points[-1][1]))
    parts.append(el("polyline", points=" ".join(f"{a},{b}" for a, b in points), cls="score"))
    for shot in shots:
        level = str(shot.event["level"])
        rank = _rank(level, order)
        label = (
            f"snapshot {shot.event['snapshot']} at {review.clock(shot.event['t'])}: "
            f"{level}, {float(shot.event['score']):g} points"
        )
        parts.append(
            el(
                "a",
                el(
                    "g",
                    el(
                        "circle",
                        el("title", label),
                        cx=x(shot.event["t"]),
                        cy=y(shot.event["score"]),
                        r=6,
                        cls=f"lv{rank}",
                    ),
                    cls="save",
                    data_step=shot.index - 1,
                ),
                href=f"#snap-{shot.index}",
            )
        )
    return el(
        "svg",
        parts,
        viewBox=f"0 0 {WIDTH} {HEIGHT}",
        cls="timeline",
        role="img",
        aria_label="the session's timeline",
        xmlns="http://www.w3.org/2000/svg",
    )


def _rank(level: object, order: list[str]) -> int:
    """A level's colour: its place among the track's (0, the lowest, for one it does not
    know)."""
    return order.index(level) if level in order else 0


def _mark(event: dict, at: float) -> Html:
    """A hint (a triangle), a solution read (a square) or a refusal (a diamond) on the lane."""
    kind = event["kind"]
    what = (
        f"hint {event.get('item')} step {event.get('step')}"
        if kind == "hint"
        else f"solution {event.get('item')}"
        if kind == "solution"
        else f"refused: {event.get('what')} {event.get('item')}"
    )
    shape = {
        "hint": f"{at - 6},{LANE + 6} {at + 6},{LANE + 6} {at},{LANE - 6}",
        "solution": f"{at - 5},{LANE - 5} {at + 5},{LANE - 5} {at + 5},{LANE + 5} "
        f"{at - 5},{LANE + 5}",
        "refused": f"{at},{LANE - 7} {at + 7},{LANE} {at},{LANE + 7} {at - 7},{LANE}",
    }[kind]
    return el(
        "polygon", el("title", f"{what} at {review.clock(event['t'])}"), points=shape, cls=kind
    )


def _legend(track: tracks.Track) -> Html:
    def swatch(cls: str, shape: Html) -> Html:
        return el("svg", shape, width=14, height=14, viewBox="0 0 14 14", cls=cls)

    levels = [
        el("span", swatch("", el("circle", cx=7, cy=7, r=6, cls=f"lv{rank}")), " ", level)
        for rank, level in enumerate(verbs.ranks(track))
    ]
    marks = [
        el("span", swatch("timeline-mark", el("polygon", points=points, cls=kind)), " ", label)
        for kind, points, label in (
            ("hint", "1,13 13,13 7,1", "hint asked"),
            ("solution", "2,2 12,2 12,12 2,12", "solution read"),
            ("refused", "7,0 14,7 7,14 0,7", "refused (strict)"),
        )
    ]
    return el("div", levels, marks, el("span", "dashed: a stage opens"), cls="legend")


def _stepper(shots: list[Snapshot]) -> Html:
    return el(
        "div",
        el("button", "\u2190 previous", type="button", data_go="prev"),
        el("input", type="range", min=0, max=len(shots) - 1, value=0, aria_label="snapshot"),
        el("button", "next \u2192", type="button", data_go="next"),
        el("output", _label(shots[0], len(shots))),
        data_stepper=True,
        cls="stepper",
    )


def _label(shot: Snapshot, total: int) -> str:
    return (
        f"snapshot {shot.index} of {total} · {review.clock(shot.event['t'])} · "
        f"{shot.event['level']} · {float(shot.event['score']):g} points"
    )


def _snapshot(
    shot: Snapshot, total: int, shots: list[Snapshot], checked: verify.Verification
) -> Html:
    event = shot.event
    before = shots[shot.index - 2] if shot.index > 1 else None
    gained = float(event["score"]) - (float(before.event["score"]) if before else 0.0)
    order = verbs.ranks(tracks.get(shot.track))
    check = checked.save_of(event)
    name_check = _name_check(checked, event["snapshot"])
    heading = el(
        "h3",
        f"Snapshot {event['snapshot']}",
        el("span", f"at {review.clock(event['t'])}", cls="dim"),
        el("span", str(event["level"]), cls=f"badge lv{_rank(event['level'], order)}"),
        el("span", f"{float(event['score']):g} points ({gained:+g})"),
        _check_badge(check.verdict, check.differences) if check else None,
        el("span", "EDITED", cls="badge edited") if name_check else None,
    )
    again = (
        None
        if check is None
        else el(
            "p",
            f"Graded again at stage {check.stage}: "
            + (check.graded.summary() if check.graded else "no snapshot")
            + ": "
            + review.mark(check.verdict, check.differences),
            cls=CHECK_CLASS[check.verdict],
        )
    )
    verdict = el(
        "div",
        el("h4", f"Verdict: the items of stage {shot.stage}"),
        el("ul", [_verdict_line(item, shot) for item in shot.graded], cls="verdict"),
        el("p", "The record keeps which items passed, not why the others did not.", cls="dim"),
        _since(shot),
    )
    if not shot.readable:
        changes = el(
            "p",
            "Not a snapshot name the kata makes (NNN-<8 hex digits>): its folder is not read.",
            cls="fail",
        )
    elif before is None:
        changes = el("p", "The first snapshot: nothing before it.", cls="dim")
    else:
        changes = el(
            "div",
            el("h4", f"Diff from snapshot {before.event['snapshot']}"),
            _diff(shot.diff)
            if shot.diff
            else el("p", "No change in the files (a stage opened: graded again).", cls="dim"),
        )
    files = [_file(name, source, shot, shots) for name, source in shot.files.items()]
    files += [el("p", el("code", name), ": ", why, cls="fail") for name, why in shot.unread.items()]
    return el(
        "section",
        heading,
        name_check,
        again,
        el("div", verdict, changes, cls="columns"),
        files,
        cls="snapshot",
        id=f"snap-{shot.index}",
        data_label=_label(shot, total),
    )


def _verdict_line(item: str, shot: Snapshot) -> Html:
    passes = item in shot.passing
    change = (
        el(
            "span",
            "now passes" if passes else "stopped passing",
            cls=f"change {'new' if passes else 'lost'}",
        )
        if passes != (item in shot.before)
        else None
    )
    return el(
        "li",
        el(
            "span", "PASS" if passes else "not passing", cls=f"badge {'pass' if passes else 'fail'}"
        ),
        el("span", item, cls="id"),
        change,
    )


def _since(shot: Snapshot) -> Html | None:
    if not shot.since:
        return None
    lines = []
    for event in shot.since:
        kind, at = event["kind"], review.clock(event["t"])
        lines.append(
            el(
                "li",
                f"{at}: "
                + (
                    f"this save opened stage {event.get('stage')}"
                    if kind == "stage"
                    else f"hint {event.get('item')}, step {event.get('step')}"
                    if kind == "hint"
                    else f"solution {event.get('item')} read"
                    if kind == "solution"
                    else f"refused (strict): {event.get('what')} {event.get('item')}"
                    if kind == "refused"
                    else f"{kind}"
                ),
            )
        )
    return join(el("h4", "Since the save before"), el("ul", lines, cls="events"))


def _diff(diff: str) -> Html:
    classes = {"+": "a", "-": "d", "@": "h"}
    lines = [
        el("span", line, cls="f" if line.startswith(("+++ ", "--- ")) else classes.get(line[:1]))
        for line in diff.split("\n")
    ]
    return el("pre", lines, cls="diff")


def _file(name: str, source: str | None, shot: Snapshot, shots: list[Snapshot]) -> Html:
    if source is None:
        shown = next(s for s in reversed(shots[: shot.index - 1]) if s.files.get(name) is not None)
        return el(
            "p",
            el("code", name),
            " unchanged since ",
            el("a", f"snapshot {shown.event['snapshot']}", href=f"#snap-{shown.index}"),
            cls="dim",
        )
    lines = source.split("\n")
    changed = shot.changed.get(name, set())
    note = f", {len(changed)} new or changed: highlighted" if changed else ""
    return el(
        "details",
        el("summary", el("code", name), f" ({len(lines)} lines{note})"),
        el(
            "pre",
            [el("span", line, cls="a" if n in changed else None) for n, line in enumerate(lines)],
            cls="code",
        ),
        open=True,
    )


def _changed_lines(before: str, after: str) -> set[int]:
    """The lines of `after` (0-based) that are not in `before` as they stand."""
    matcher = difflib.SequenceMatcher(None, before.split("\n"), after.split("\n"))
    return {
        n
        for tag, _, _, start, end in matcher.get_opcodes()
        if tag in ("replace", "insert")
        for n in range(start, end)
    }


def _answers(session: dict, workspace: Path) -> Html:
    """Each question asked, the candidate's answer beside the model answer (once the session
    has ended). An answers.md that is not a regular file inside the workspace (a link to the
    interviewer's files, a FIFO that would never end) is not read, and the page says so."""
    answers = workspace / "answers.md"
    inside = os.path.realpath(answers).startswith(os.path.realpath(workspace) + os.sep)
    readable = not os.path.lexists(answers) or (inside and answers.is_file())
    given = verbs.answers(workspace) if readable else {}
    ended = session["ended"] is not None
    blocks = (
        []
        if readable
        else [
            el(
                "p",
                "answers.md is not a file inside the workspace (a "
                "link outside it, or no regular file): not read.",
                cls="fail",
            )
        ]
    )
    for item in verbs.asked(session):
        model = MODEL_ANSWERS[item.id] if ended else "(shown when the session ends)"
        blocks.append(
            join(
                el("h3", el("code", item.id), ": ", QUESTIONS[item.id]),
                el(
                    "div",
                    el(
                        "div",
                        el("h4", "The candidate's answer"),
                        el("div", quote(given.get(item.id, "")) or "(no answer)", cls="msg answer"),
                    ),
                    el("div", el("h4", "Model answer"), el("div", model, cls="answer")),
                    cls="pair",
                ),
            )
        )
    return join(blocks) if verbs.asked(session) else el("p", "No question asked yet.", cls="dim")
