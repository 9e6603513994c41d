"""What an interviewer reads after a session: `kata interview report` and `replay`.

The report gives each save's claim, the stages opened, the time to each level, each item's first
pass, the hints and solutions asked (and refused), the level over time (a text strip, or a PNG
with matplotlib, the `bench` extra), the final hidden grade with its similarity line, and each
conceptual answer beside its model answer. The same report is written as Markdown and as JSON.
The replay shows each snapshot's diff from the one before, with its grade and time.

A record is a claim (graders.interview.verify): every output opens with what was checked of it
(`checked`, a verify.Verification). Without `--verify` that is the record as written, its
snapshots checked against their names; with it, every claim is shown beside the grade of its
snapshot, and a record that disagrees is named as edited, in every format. What no grade can
check is said to be the record's word.

Everything read from the record or the workspace is data (contract section 5), whatever the
schema let through: printable in the terminal (graders.shared.untrusted), in code spans or
fenced blocks no text of theirs can close in Markdown, printable in JSON, and in the PNG's
labels too.
"""

from __future__ import annotations

import copy
import difflib
import re
from pathlib import Path
from typing import Callable

from graders.interview import record, session as verbs
from graders.interview.questions import MODEL_ANSWERS, QUESTIONS
from graders.interview.verify import RECORDS_WORD, Verification, unverified
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.untrusted import clip, markdown_code, printable, quote

STRIP_WIDTH = 60  # columns of the level-over-time strip
MARKS = {"agrees": "agrees", "disagrees": "DISAGREES", "unchecked": "not checked"}


def saves(session: dict) -> list[dict]:
    return [e for e in session["events"] if e["kind"] == "save"]


def figures(session: dict) -> dict:
    """The report's figures: seconds to each level (None: never reached), each item's first
    pass in seconds (None: never), the hints, solutions and refusals, the level after each save
    and the final grade's level, score and similarity."""
    track = tracks.get(session["track"])
    order = verbs.ranks(track)
    to_level = {}
    for level in order[1:]:
        to_level[level] = next(
            (e["t"] for e in saves(session) if order.index(e["level"]) >= order.index(level)), None
        )
    first_pass = {
        item.id: next((e["t"] for e in saves(session) if item.id in e["passing"]), None)
        for item in rubric_data.load().track(track)
    }
    final = session["final"]
    return {
        "time_to_level": to_level,
        "first_pass": first_pass,
        "hints": [e for e in session["events"] if e["kind"] == "hint"],
        "solutions": [e for e in session["events"] if e["kind"] == "solution"],
        "refused": [e for e in session["events"] if e["kind"] == "refused"],
        "stages": [e for e in session["events"] if e["kind"] == "stage"],
        "levels": [[e["t"], e["level"]] for e in saves(session)],
        "final": None
        if final is None
        else {
            key: final.get(key)
            for key in ("level", "score", "max_score", "similarity", "seed", "isolation")
        },
    }


def as_graded(session: dict, checked: Verification) -> dict:
    """The record with each save's claim replaced by its grade (a save not graded keeps its
    claim): the figures the grades give, to set beside the record's."""
    graded = copy.deepcopy(session)
    for event, original in zip(saves(graded), saves(session)):
        check = checked.save_of(original)
        if check is not None and check.graded is not None:
            event.update(
                level=check.graded.level,
                score=check.graded.score,
                passing=list(check.graded.passing),
            )
    return graded


def clock(seconds: float | None) -> str:
    """Seconds as "12m 05s"; "-" for None."""
    if seconds is None:
        return "-"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes}m {rest:02d}s"


def strip(session: dict, width: int = STRIP_WIDTH) -> list[str]:
    """The level over time as text: a row per level, highest first, a block in each column of
    the session's time (to its end, or its last event while it runs) where the level held was at
    least that row's; then the time axis."""
    track = tracks.get(session["track"])
    order = verbs.ranks(track)
    span = max(
        60.0,
        verbs.elapsed(session, record.epoch(session["ended"]))
        if session["ended"]
        else max([e["t"] for e in session["events"]], default=0.0),
    )
    steps = [(t, order.index(level)) for t, level in figures(session)["levels"]]
    held = []
    for column in range(width):
        moment = (column + 1) * span / width
        held.append(max([rank for t, rank in steps if t <= moment][-1:], default=0))
    label = max(len(level) for level in order[1:])
    rows = [
        f"{level:>{label}} |" + "".join("█" if rank >= order.index(level) else " " for rank in held)
        for level in reversed(order[1:])
    ]
    axis = f"{'':>{label}}  0m" + clock(span).rjust(width - 2)
    return rows + [axis]


# --- what was checked ---------------------------------------------------------------------------


def verdict_lines(
    session: dict, checked: Verification, field: Callable[[str], str] = printable
) -> list[str]:
    """The report's first lines, in words every format shows: what was checked of the record,
    and whether it is edited. `field` shows a field read from the record (the terminal's
    printable, Markdown's code span)."""
    mismatched = [s.problem(field) for s in checked.mismatched]
    if not checked.verified:
        out = [
            "This report shows the record as written: no snapshot was graded again "
            "(--verify grades each one and checks every claim)."
        ]
        if mismatched:
            out.append(
                f"EDITED: {len(mismatched)} snapshot(s) do not match their names: "
                + "; ".join(mismatched)
                + "."
            )
        return out
    seed = session["final"]["seed"] if session["final"] else None
    how = (
        "every snapshot graded again (public cases, at the stages the grades open"
        + (f"; the final with --hidden at seed {seed}" if seed is not None else "")
        + ")"
    )
    if checked.edited:
        parts = (
            [f"{checked.disagreeing} claim(s) disagree with the grades"]
            if checked.disagreeing
            else []
        )
        parts += [f"{len(mismatched)} snapshot(s) do not match their names"] if mismatched else []
        out = [
            f"EDITED: this record is not what its snapshots grade: {' and '.join(parts)} "
            f"(marked DISAGREES below; {how})."
        ]
        out += [f"  {problem}." for problem in mismatched]
    else:
        out = [f"Verified: {how}: every claim checked agrees."]
    if checked.unchecked:
        out.append(f"{checked.unchecked} claim(s) could not be checked (marked below).")
    return out


def mark(
    verdict: str, differences: tuple[str, ...] = (), field: Callable[[str], str] = printable
) -> str:
    """A claim's check as the report shows it after the claim: each difference (which quotes
    the record) as `field` shows it."""
    shown = "; ".join(field(d) for d in differences)
    return MARKS[verdict] + (f" ({shown})" if shown and verdict != "agrees" else "")


def _save_claim(event: dict) -> str:
    return (
        f"{printable(event['level'])}, {event['score']:g} points, "
        f"{len(event['passing'])} items pass"
    )


def _save_lines(session: dict, checked: Verification, indent: str = "  ") -> list[str]:
    """A line per save, for the terminal: its snapshot, time and claim, and what was checked of
    it."""
    out = []
    for event in saves(session):
        line = (
            f"{indent}{printable(event['snapshot'])} at {clock(event['t'])}: {_save_claim(event)}"
        )
        check = checked.save_of(event)
        if check is not None:
            graded = f"graded again at stage {check.stage}: " + (
                check.graded.summary() if check.graded else "no snapshot"
            )
            line += f" | {graded}: {mark(check.verdict, check.differences)}"
        snapshot = checked.snapshot(event["snapshot"])
        if snapshot is not None and not snapshot.matches:
            line += f" | EDITED: {snapshot.problem(printable)}"
        out.append(line)
    return out


def stages_line(
    session: dict, checked: Verification, field: Callable[[str], str] = printable
) -> str:
    def said(opened) -> str:
        return ", ".join(f"{field(stage)} after save {n}" for n, stage in opened) or "none"

    line = f"Stages opened: {said(_claimed_stages(session))}"
    if checked.stages is not None:
        line += f" | the grades open: {said(checked.stages.graded)}: {mark(checked.stages.verdict)}"
    return line


def _claimed_stages(session: dict) -> list[tuple[int, str]]:
    out, count = [], 0
    for event in session["events"]:
        count += event["kind"] == "save"
        if event["kind"] == "stage":
            out.append((count, event["stage"]))
    return out


# --- the report -----------------------------------------------------------------------------


def lines(session: dict, workspace: Path, checked: Verification | None = None) -> list[str]:
    """The report as plain lines for the terminal: what was checked first, then the record,
    every field of it printable."""
    checked = checked or unverified(session, workspace)
    found = figures(session)
    regraded = figures(as_graded(session, checked)) if checked.verified else None
    out = [
        *verdict_lines(session, checked),
        "",
        f"Interview session in {printable(str(workspace))}: track "
        f"{printable(session['track'])}, {session['minutes']:g} minutes"
        + (", strict" if session["strict"] else ""),
        f"started {printable(session['started'])}, "
        + (f"ended {printable(session['ended'])}" if session["ended"] else "still running")
        + f"; stage reached: {printable(session['stage'])}",
        "",
        "Saves",
    ]
    out += _save_lines(session, checked) or ["  none"]
    out += [stages_line(session, checked), "", "Time to each level"]
    out += [
        f"  {printable(level):<9}{clock(t)}" + _regraded(t, regraded, "time_to_level", level)
        for level, t in found["time_to_level"].items()
    ]
    out += ["", "First pass of each item"]
    out += [
        f"  {item:<22}{clock(t)}" + _regraded(t, regraded, "first_pass", item)
        for item, t in found["first_pass"].items()
    ]
    out += [
        "",
        "Hints asked (the record's word): "
        + (
            ", ".join(
                f"{printable(str(e['item']))} step {printable(str(e['step']))} at {clock(e['t'])}"
                for e in found["hints"]
            )
            or "none"
        ),
    ]
    if found["solutions"]:
        out.append(
            "Solutions read: "
            + ", ".join(
                f"{printable(str(e['item']))} at {clock(e['t'])}" for e in found["solutions"]
            )
        )
    if found["refused"]:
        out.append(
            "Refused (strict): "
            + ", ".join(
                f"{printable(str(e['what']))} {printable(str(e['item']))} at {clock(e['t'])}"
                for e in found["refused"]
            )
        )
    out += ["", "Level over time", *(f"  {printable(row)}" for row in strip(session)), ""]
    out += _final_lines(session, workspace, checked)
    out += ["", f"The record's word (no grade checks it): {RECORDS_WORD}."]
    for item_id, question, answer, model in _answers(session, workspace):
        out += ["", f"## {item_id}: {question}", "  Candidate's answer:"]
        out += [f"    {line}" for line in (quote(answer) or "(no answer)").splitlines()]
        out += ["  Model answer:", *(f"    {line}" for line in model.splitlines())]
    return out


def _regraded(claimed: float | None, regraded: dict | None, figure: str, key: str) -> str:
    """After a figure of the record, the grades' figure when it differs (--verify)."""
    if regraded is None or regraded[figure][key] == claimed:
        return ""
    return f"   DISAGREES: graded again, {_when(regraded[figure][key])}"


def _when(seconds: float | None) -> str:
    return "never" if seconds is None else clock(seconds)


def markdown(session: dict, workspace: Path, checked: Verification | None = None) -> str:
    """The report as Markdown for the interviewer: what was checked first, every field of the
    record in a code span, the candidate's answers in fenced blocks."""
    checked = checked or unverified(session, workspace)
    found = figures(session)
    regraded = figures(as_graded(session, checked)) if checked.verified else None
    verdict = verdict_lines(session, checked, _md)
    out = [
        f"**{verdict[0]}**",
        *(f"{line}  " for line in verdict[1:]),
        "",
        f"# Interview session: {_md(session['track'])}, {session['minutes']:g} minutes"
        + (" (strict)" if session["strict"] else ""),
        "",
        f"Started {_md(session['started'])}, "
        + (f"ended {_md(session['ended'])}" if session["ended"] else "still running")
        + f". Stage reached: {_md(session['stage'])}.",
        "",
        "## Saves",
        "",
    ]
    checks = checked.verified
    out += [
        "| snapshot | time | level | score | items pass |"
        + (" graded again | check |" if checks else "")
        + " snapshot matches its name |",
        "| --- | --- | --- | --- | --- |" + (" --- | --- |" if checks else "") + " --- |",
    ]
    for event in saves(session):
        check, snapshot = checked.save_of(event), checked.snapshot(event["snapshot"])
        row = (
            f"| {_md(event['snapshot'])} | {clock(event['t'])} | {_md(event['level'])} | "
            f"{event['score']:g} | {len(event['passing'])} |"
        )
        if checks:
            graded = f"stage {_md(check.stage)}: " + (
                _md(check.graded.summary()) if check.graded else "no snapshot"
            )
            row += f" {graded} | {mark(check.verdict, check.differences, _md)} |"
        row += (
            " yes |"
            if snapshot is None or snapshot.matches
            else f" **EDITED**: {snapshot.problem(_md)} |"
        )
        out.append(row)
    out += [
        "",
        stages_line(session, checked, _md),
        "",
        "## Time to each level",
        "",
        "| level | time |" + (" graded again |" if checks else ""),
        "| --- | --- |" + (" --- |" if checks else ""),
    ]
    out += [
        f"| {_md(level)} | {clock(t)} |" + _md_regraded(t, regraded, "time_to_level", level)
        for level, t in found["time_to_level"].items()
    ]
    out += [
        "",
        "## First pass of each item",
        "",
        "| item | first pass |" + (" graded again |" if checks else ""),
        "| --- | --- |" + (" --- |" if checks else ""),
    ]
    out += [
        f"| {item} | {clock(t)} |" + _md_regraded(t, regraded, "first_pass", item)
        for item, t in found["first_pass"].items()
    ]
    out += ["", "## Hints (the record's word)", ""]
    out += [
        f"- {_md(e['item'])}, step {_md(e['step'])}, at {clock(e['t'])}" for e in found["hints"]
    ] or ["None asked."]
    out += [f"- solution {_md(e['item'])} read at {clock(e['t'])}" for e in found["solutions"]]
    out += [
        f"- refused: {_md(e['what'])} {_md(e['item'])} at {clock(e['t'])}" for e in found["refused"]
    ]
    out += [
        "",
        "## Level over time",
        "",
        *_fenced("\n".join(strip(session))),
        "",
        "## Final grade",
        "",
    ]
    out += [f"{line}  " for line in _final_lines(session, workspace, checked, _md)]
    out += ["", f"The record's word (no grade checks it): {RECORDS_WORD}."]
    out += ["", "## Conceptual questions"]
    for item_id, question, answer, model in _answers(session, workspace):
        out += [
            "",
            f"### {item_id}",
            "",
            f"*{question}*",
            "",
            "Candidate's answer:",
            "",
            *_fenced(answer or "(no answer)"),
            "",
            "Model answer:",
            "",
            model,
        ]
    return "\n".join(out) + "\n"


def _md_regraded(claimed: float | None, regraded: dict | None, figure: str, key: str) -> str:
    if regraded is None:
        return ""
    if regraded[figure][key] == claimed:
        return " agrees |"
    return f" **DISAGREES**: {_when(regraded[figure][key])} |"


def to_json(session: dict, workspace: Path, checked: Verification | None = None) -> dict:
    """The report as JSON: what was checked, the record (every string printable), the figures
    and each question with its answers."""
    checked = checked or unverified(session, workspace)
    return {
        "checked": _json_checked(session, checked),
        "session": _printable_json(session),
        "figures": _printable_json(figures(session)),
        "answers": [
            {"id": item_id, "question": question, "answer": quote(answer), "model_answer": model}
            for item_id, question, answer, model in _answers(session, workspace)
        ],
        "records_word": RECORDS_WORD,
    }


def _json_checked(session: dict, checked: Verification) -> dict:
    """The JSON of what was checked: `verified` (whether --verify graded the snapshots),
    `edited`, the verdict in words, every snapshot against its name, and with --verify each
    save's, the stages' and the final's check."""

    def graded(value) -> dict | None:
        return (
            None
            if value is None
            else {
                "level": value.level,
                "score": value.score,
                "passing": list(value.passing),
                "unchecked": list(value.unchecked),
            }
        )

    out = {
        "verified": checked.verified,
        "edited": checked.edited,
        "verdict": verdict_lines(session, checked),
        "snapshots": [
            {"name": printable(s.name), "hash": s.actual, "matches": s.matches}
            for s in checked.snapshots
        ],
    }
    if checked.verified:
        out["seconds"] = round(checked.seconds, 1)
        out["saves"] = [
            {
                "snapshot": printable(c.event["snapshot"]),
                "stage": c.stage,
                "graded": graded(c.graded),
                "check": c.verdict,
                "differences": [printable(d) for d in c.differences],
            }
            for c in checked.saves
        ]
        out["stages"] = (
            None
            if checked.stages is None
            else {
                "claimed": [list(pair) for pair in checked.stages.claimed],
                "graded": [list(pair) for pair in checked.stages.graded],
                "check": checked.stages.verdict,
            }
        )
        out["final"] = (
            None
            if checked.final is None
            else {
                "graded": graded(checked.final.graded),
                "check": checked.final.verdict,
                "differences": [printable(d) for d in checked.final.differences],
            }
        )
    return out


def _printable_json(value):
    """`value` (JSON data read from the record) with every string, keys included, as `quote`
    shows it: valid UTF-8, no control character."""
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, list):
        return [_printable_json(v) for v in value]
    if isinstance(value, dict):
        return {quote(str(k)): _printable_json(v) for k, v in value.items()}
    return value


def save_png(session: dict, path: Path) -> None:
    """The level over time as a step plot, the stages' openings marked. ImportError when
    matplotlib is not installed (the `bench` extra). Its labels are as `_png_label` shows them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = verbs.ranks(tracks.get(session["track"]))
    found = figures(session)
    times = [0.0] + [t / 60 for t, _ in found["levels"]]
    levels = [0] + [order.index(level) for _, level in found["levels"]]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step(times + [session["minutes"]], levels + levels[-1:], where="post")
    for event in found["stages"]:
        ax.axvline(event["t"] / 60, linestyle=":", alpha=0.5)
    ax.set(
        xlim=(0, session["minutes"]),
        yticks=range(len(order)),
        yticklabels=[_png_label(level) for level in order],
        xlabel="minutes",
        title=_png_label(f"level over time ({session['track']} track)"),
    )
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _png_label(text: str) -> str:
    """A label of the PNG: printable, and no `$` that matplotlib would read as mathtext."""
    return printable(text).replace("$", r"\$")


# --- the replay -----------------------------------------------------------------------------


def replay(session: dict, workspace: Path, step: int | None = None) -> list[tuple[dict, str]]:
    """Each save (or only the one of snapshot number `step`) with the unified diff of its
    snapshot from the one before ("" for the first, which has none before it). ValueError for
    a `step` that no save has."""
    events = saves(session)
    chosen = [n for n, e in enumerate(events) if step is None or _number(e) == step]
    if step is not None and not chosen:
        numbers = ", ".join(str(_number(e)) for e in events) or "none yet"
        raise ValueError(f"no snapshot {step}: the session's are {numbers}")
    return [(events[n], _diff(workspace, events[n - 1] if n else None, events[n])) for n in chosen]


def replay_lines(
    session: dict, workspace: Path, step: int | None = None, checked: Verification | None = None
) -> list[str]:
    """The replay for the terminal: what was checked, then a line per save (number, time,
    level, score, and its check), then its diff, printable."""
    checked = checked or unverified(session, workspace)
    steps = replay(session, workspace, step)
    if not steps:
        return []
    out = [*verdict_lines(session, checked), ""]
    for event, diff in steps:
        out += _save_lines({**session, "events": [event]}, checked, indent="snapshot ")
        out += (
            [f"  {printable(line)}" for line in diff.splitlines()]
            if diff
            else ["  (the first snapshot)"]
        )
        out.append("")
    return out


def _final_lines(
    session: dict, workspace: Path, checked: Verification, field: Callable[[str], str] = printable
) -> list[str]:
    """The final grade's lines: its level and score (and with --verify its check), the items
    that do not pass and the similarity line; for one interrupted (partial), the items it graded
    and how to grade the snapshot in full with the same cases. Every field of the record, and
    the path, as `field` shows it."""
    from graders.formats.report import similarity_line

    final = session["final"]
    if final is None:
        return ["Final grade: not yet (the session has not ended: `kata interview end DIR`)."]
    failing = [field(i["id"]) for i in final["items"] if i["status"] != "pass"]
    check = ""
    if checked.final is not None:
        graded = checked.final.graded
        check = (
            " | graded again: "
            + (f"{graded.level}, {graded.score:g} points" if graded else "no snapshot")
            + f": {mark(checked.final.verdict, checked.final.differences, field)}"
        )
    snapshot = checked.snapshot(final["implementation"].split("/")[0])
    if snapshot is not None and not snapshot.matches:
        check += f" | EDITED: {snapshot.problem(field)}"
    if final["partial"]:  # the final grade was interrupted (Ctrl-C): the items it graded
        total = len(rubric_data.load().track(tracks.get(session["track"])))
        path = record.folder(Path(workspace)) / final["implementation"]
        return [
            f"Final grade (--hidden, seed {final['seed']}): interrupted (Ctrl-C) after "
            f"{len(final['items'])} of {total} items, {final['score']:g}/"
            f"{final['max_score']:g} points on those; no level{check}",
            "Items graded that do not pass: " + (", ".join(failing) or "none"),
            "Grade the snapshot in full: "
            + field(f"kata grade --hidden --seed {final['seed']} {path}"),
        ]
    out = [
        f"Final grade (--hidden, seed {final['seed']}): {field(str(final['level']))}, "
        f"{final['score']:g}/{final['max_score']:g} points{check}"
    ]
    out.append("Items that do not pass: " + (", ".join(failing) or "none"))
    if final.get("similarity"):
        out.append(
            similarity_line(
                [
                    {"solution": field(s["solution"]), "fraction": s["fraction"]}
                    for s in final["similarity"]
                ]
            )
        )
    return out


def _answers(session: dict, workspace: Path) -> list[tuple[str, str, str, str]]:
    """(id, question, the candidate's answer, the model answer) of every question asked; the
    model answers only once the session has ended ("" before)."""
    given = verbs.answers(workspace)
    ended = session["ended"] is not None
    return [
        (
            item.id,
            QUESTIONS[item.id],
            given.get(item.id, ""),
            MODEL_ANSWERS[item.id] if ended else "(shown when the session ends)",
        )
        for item in verbs.asked(session)
    ]


def _diff(workspace: Path, before: dict | None, after: dict) -> str:
    """The unified diff of both files from snapshot `before` to `after` ("" when `before` is
    None; a snapshot folder that is missing reads as empty)."""
    if before is None:
        return ""
    old, new = (record.folder(workspace) / e["snapshot"] for e in (before, after))
    names = sorted({p.name for folder in (old, new) if folder.is_dir() for p in folder.iterdir()})
    text = []
    for name in names:
        text += difflib.unified_diff(
            _read(old / name),
            _read(new / name),
            fromfile=f"{before['snapshot']}/{name}",
            tofile=f"{after['snapshot']}/{name}",
        )
    return "".join(line if line.endswith("\n") else line + "\n" for line in text)


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines(keepends=True)
    except (FileNotFoundError, IsADirectoryError):
        return []


def _number(event: dict) -> int:
    return int(event["snapshot"].split("-")[0])


def _fenced(text: str) -> list[str]:
    """`text` (the candidate's, printable and clipped) as a fenced block that no line of it can
    close: the fence is longer than any run of backticks or tildes in it."""
    shown = clip(printable(text))
    longest = max((len(run) for run in re.findall(r"`+|~+", shown)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}text", *shown.splitlines(), fence]


def _md(value: object) -> str:
    """A field read from the record, in Markdown: a code span (no link, image, HTML or cell)."""
    return markdown_code(str(value)) or "(empty)"
