"""What an interviewer reads after a session: `kata interview report` and `replay`.

The report gives the time to each level, each item's first pass, the hints and solutions asked
(and refused), the level over time (a text strip, or a PNG with matplotlib, the `bench` extra),
the final hidden grade with its similarity line, and each conceptual answer beside its model
answer. The same report is written as Markdown and as JSON. The replay shows each snapshot's
diff from the one before, with its grade and time.

Everything the candidate wrote (answers.md, the files in a diff) is data (contract section 5):
printable in the terminal (graders.shared.untrusted), in fenced blocks no line of theirs can
close in Markdown, and quoted in JSON.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from graders.interview import record, session as verbs
from graders.interview.questions import MODEL_ANSWERS, QUESTIONS
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.untrusted import clip, printable, quote

STRIP_WIDTH = 60  # columns of the level-over-time strip


def ranks(track: tracks.Track) -> list[str]:
    """A save's possible levels, lowest first."""
    return ["below L4", *rubric_data.load().levels] if track.levels else ["none", track.section]


def saves(session: dict) -> list[dict]:
    return [e for e in session["events"] if e["kind"] == "save"]


def figures(session: dict) -> dict:
    """The report's figures: seconds to each level (None: never reached), each item's first
    pass in seconds (None: never), the hints, solutions and refusals, the level after each save
    and the final grade's level, score and similarity."""
    track = tracks.get(session["track"])
    order = ranks(track)
    to_level = {}
    for level in order[1:]:
        to_level[level] = next((e["t"] for e in saves(session)
                                if order.index(e["level"]) >= order.index(level)), None)
    first_pass = {item.id: next((e["t"] for e in saves(session) if item.id in e["passing"]), None)
                  for item in rubric_data.load().track(track)}
    final = session["final"]
    return {
        "time_to_level": to_level,
        "first_pass": first_pass,
        "hints": [e for e in session["events"] if e["kind"] == "hint"],
        "solutions": [e for e in session["events"] if e["kind"] == "solution"],
        "refused": [e for e in session["events"] if e["kind"] == "refused"],
        "stages": [e for e in session["events"] if e["kind"] == "stage"],
        "levels": [[e["t"], e["level"]] for e in saves(session)],
        "final": None if final is None else {key: final.get(key) for key in (
            "level", "score", "max_score", "similarity", "seed", "isolation")},
    }


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
    order = ranks(track)
    span = max(60.0, verbs.elapsed(session, record.epoch(session["ended"])) if session["ended"]
               else max([e["t"] for e in session["events"]], default=0.0))
    steps = [(t, order.index(level)) for t, level in figures(session)["levels"]]
    held = []
    for column in range(width):
        moment = (column + 1) * span / width
        held.append(max([rank for t, rank in steps if t <= moment][-1:], default=0))
    label = max(len(level) for level in order[1:])
    rows = [f"{level:>{label}} |" + "".join("█" if rank >= order.index(level) else " "
                                            for rank in held)
            for level in reversed(order[1:])]
    axis = f"{'':>{label}}  0m" + clock(span).rjust(width - 2)
    return rows + [axis]


def lines(session: dict, workspace: Path) -> list[str]:
    """The report as plain lines for the terminal (the candidate's answers made printable)."""
    found = figures(session)
    out = [f"Interview session in {printable(str(workspace))}: track {session['track']}, "
           f"{session['minutes']:g} minutes{', strict' if session['strict'] else ''}",
           f"started {session['started']}, "
           + (f"ended {session['ended']}" if session["ended"] else "still running")
           + f"; stage reached: {session['stage']}", "", "Time to each level"]
    out += [f"  {level:<9}{clock(t)}" for level, t in found["time_to_level"].items()]
    out += ["", "First pass of each item"]
    out += [f"  {item:<22}{clock(t)}" for item, t in found["first_pass"].items()]
    out += ["", "Hints asked: " + (", ".join(f"{e['item']} step {e['step']} at {clock(e['t'])}"
                                             for e in found["hints"]) or "none")]
    if found["solutions"]:
        out.append("Solutions read: " + ", ".join(
            f"{printable(str(e['item']))} at {clock(e['t'])}" for e in found["solutions"]))
    if found["refused"]:
        out.append("Refused (strict): " + ", ".join(
            f"{e['what']} {printable(str(e['item']))} at {clock(e['t'])}"
            for e in found["refused"]))
    out += ["", "Level over time", *(f"  {row}" for row in strip(session)), ""]
    out += _final_lines(session, workspace)
    for item_id, question, answer, model in _answers(session, workspace):
        out += ["", f"## {item_id}: {question}", "  Candidate's answer:"]
        out += [f"    {line}" for line in (quote(answer) or "(no answer)").splitlines()]
        out += ["  Model answer:", *(f"    {line}" for line in model.splitlines())]
    return out


def markdown(session: dict, workspace: Path) -> str:
    """The report as Markdown for the interviewer: the candidate's answers in fenced blocks."""
    found = figures(session)
    out = [f"# Interview session: {session['track']}, {session['minutes']:g} minutes"
           + (" (strict)" if session["strict"] else ""), "",
           f"Started {session['started']}, "
           + (f"ended {session['ended']}" if session["ended"] else "still running")
           + f". Stage reached: **{session['stage']}**.", "",
           "## Time to each level", "", "| level | time |", "| --- | --- |"]
    out += [f"| {level} | {clock(t)} |" for level, t in found["time_to_level"].items()]
    out += ["", "## First pass of each item", "", "| item | first pass |", "| --- | --- |"]
    out += [f"| {item} | {clock(t)} |" for item, t in found["first_pass"].items()]
    out += ["", "## Hints", ""]
    out += [f"- {e['item']}, step {e['step']}, at {clock(e['t'])}" for e in found["hints"]] or [
        "None asked."]
    out += [f"- solution `{_plain(str(e['item']))}` read at {clock(e['t'])}"
            for e in found["solutions"]]
    out += [f"- refused: {e['what']} `{_plain(str(e['item']))}` at {clock(e['t'])}"
            for e in found["refused"]]
    out += ["", "## Level over time", "", "```", *strip(session), "```", "", "## Final grade", ""]
    out += _final_lines(session, workspace)
    out += ["", "## Conceptual questions"]
    for item_id, question, answer, model in _answers(session, workspace):
        out += ["", f"### {item_id}", "", f"*{question}*", "", "Candidate's answer:", "",
                *_fenced(answer or "(no answer)"), "", "Model answer:", "", model]
    return "\n".join(out) + "\n"


def to_json(session: dict, workspace: Path) -> dict:
    """The report as JSON: the record, the figures and each question with its answers."""
    return {"session": session, "figures": figures(session),
            "answers": [{"id": item_id, "question": question, "answer": quote(answer),
                         "model_answer": model}
                        for item_id, question, answer, model in _answers(session, workspace)]}


def save_png(session: dict, path: Path) -> None:
    """The level over time as a step plot, the stages' openings marked. ImportError when
    matplotlib is not installed (the `bench` extra)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = ranks(tracks.get(session["track"]))
    found = figures(session)
    times = [0.0] + [t / 60 for t, _ in found["levels"]]
    levels = [0] + [order.index(level) for _, level in found["levels"]]
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.step(times + [session["minutes"]], levels + levels[-1:], where="post")
    for event in found["stages"]:
        ax.axvline(event["t"] / 60, linestyle=":", alpha=0.5)
    ax.set(xlim=(0, session["minutes"]), yticks=range(len(order)), yticklabels=order,
           xlabel="minutes", title="level over time")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replay(session: dict, workspace: Path, step: int | None = None) -> list[tuple[dict, str]]:
    """Each save (or only the one of snapshot number `step`) with the unified diff of its
    snapshot from the one before ("" for the first, which has none before it). ValueError for
    a `step` that no save has."""
    events = saves(session)
    chosen = [n for n, e in enumerate(events) if step is None or _number(e) == step]
    if step is not None and not chosen:
        numbers = ", ".join(str(_number(e)) for e in events) or "none yet"
        raise ValueError(f"no snapshot {step}: the session's are {numbers}")
    return [(events[n], _diff(workspace, events[n - 1] if n else None, events[n]))
            for n in chosen]


def replay_lines(session: dict, workspace: Path, step: int | None = None) -> list[str]:
    """The replay for the terminal: a line per save (number, time, level, score), then its diff,
    printable."""
    out = []
    for event, diff in replay(session, workspace, step):
        out.append(f"snapshot {event['snapshot']} at {clock(event['t'])}: {event['level']}, "
                   f"{event['score']:g} points, {len(event['passing'])} items pass")
        out += [f"  {printable(line)}" for line in diff.splitlines()] if diff else [
            "  (the first snapshot)"]
        out.append("")
    return out


def _final_lines(session: dict, workspace: Path) -> list[str]:
    """The final grade's lines: its level and score, the items that do not pass and the
    similarity line; for one interrupted (partial), the items it graded and how to grade the
    snapshot in full with the same cases."""
    from graders.formats.report import similarity_line

    final = session["final"]
    if final is None:
        return ["Final grade: not yet (the session has not ended: `kata interview end DIR`)."]
    failing = [i["id"] for i in final["items"] if i["status"] != "pass"]
    if final["partial"]:  # the final grade was interrupted (Ctrl-C): the items it graded
        total = len(rubric_data.load().track(tracks.get(session["track"])))
        return [f"Final grade (--hidden, seed {final['seed']}): interrupted (Ctrl-C) after "
                f"{len(final['items'])} of {total} items, {final['score']:g}/"
                f"{final['max_score']:g} points on those; no level",
                "Items graded that do not pass: " + (", ".join(failing) or "none"),
                f"Grade the snapshot in full: kata grade --hidden --seed {final['seed']} "
                f"{printable(str(record.folder(Path(workspace)) / final['implementation']))}"]
    out = [f"Final grade (--hidden, seed {final['seed']}): {final['level']}, "
           f"{final['score']:g}/{final['max_score']:g} points"]
    out.append("Items that do not pass: " + (", ".join(failing) or "none"))
    if final.get("similarity"):
        out.append(similarity_line(final["similarity"]))
    return out


def _answers(session: dict, workspace: Path) -> list[tuple[str, str, str, str]]:
    """(id, question, the candidate's answer, the model answer) of every question asked; the
    model answers only once the session has ended ("" before)."""
    given = verbs.answers(workspace)
    ended = session["ended"] is not None
    return [(item.id, QUESTIONS[item.id], given.get(item.id, ""),
             MODEL_ANSWERS[item.id] if ended else "(shown when the session ends)")
            for item in verbs.asked(session)]


def _diff(workspace: Path, before: dict | None, after: dict) -> str:
    """The unified diff of both files from snapshot `before` to `after` ("" when `before` is
    None)."""
    if before is None:
        return ""
    old, new = (record.folder(workspace) / e["snapshot"] for e in (before, after))
    names = sorted({p.name for p in (*old.iterdir(), *new.iterdir())})
    text = []
    for name in names:
        text += difflib.unified_diff(_read(old / name), _read(new / name),
                                     fromfile=f"{before['snapshot']}/{name}",
                                     tofile=f"{after['snapshot']}/{name}")
    return "".join(line if line.endswith("\n") else line + "\n" for line in text)


def _read(path: Path) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines(keepends=True)
    except FileNotFoundError:
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


def _plain(text: str) -> str:
    """A short name of the candidate's inside a code span: printable, no backtick."""
    return printable(text).replace("`", "'")
