"""Showing a grade: the rich report for people, the JSON of the contract for machines."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from graders import rubric as rubric_data
from graders.grade import GradeResult
from graders.rubric import SERVING

PASS_MESSAGE_CHARS = 160  # a pass needs no essay in the table; --json keeps every word

STATUS_STYLE = {
    "pass": ("PASS", "green"),
    "fail": ("FAIL", "red"),
    "error": ("ERROR", "red"),
    "timeout": ("TIMEOUT", "yellow"),
    "not_attempted": ("TODO", "dim"),
}


def to_json(result: GradeResult) -> dict:
    """The report as the contract's JSON (section 3)."""
    return {
        "implementation": result.implementation,
        "level": result.level,
        "score": result.score,
        "max_score": result.max_score,
        "items": [
            {"id": i.id, "level": i.level, "status": i.status, "points": i.points,
             "max_points": i.max_points, "message": i.message}
            for i in result.items
        ],
        "tells": [{"id": t.id, "detected": t.detected, "message": t.message} for t in result.tells],
        "hidden": result.hidden,
    }


def write_json(result: GradeResult, path: Path) -> None:
    path.write_text(json.dumps(to_json(result), indent=2) + "\n")


def render(result: GradeResult, console: Console) -> None:
    """Items grouped by level, the tells, the interviewer-only items, the level and the score."""
    rubric = rubric_data.load()
    for level in (*rubric.levels, SERVING):
        items = [i for i in result.items if i.level == level]
        if items:
            console.print(_level_table(level, items, rubric))
    if result.track != SERVING:
        console.print(_tells(result, rubric))
    console.print(_interviewer(rubric))
    console.print(_summary(result))


def _level_table(level: str, items, rubric: rubric_data.Rubric) -> Table:
    passed = sum(i.points for i in items)
    total = sum(i.max_points for i in items)
    title = "serving track" if level == SERVING else level
    table = Table(title=f"{title}  ({passed:g}/{total:g} points)", title_justify="left",
                  show_header=True, header_style="bold", expand=True)
    table.add_column("status", width=8, no_wrap=True)
    table.add_column("item", width=22, no_wrap=True)
    table.add_column("pts", justify="right", width=5, no_wrap=True)
    table.add_column("why", ratio=1)
    for item in items:
        label, style = STATUS_STYLE[item.status]
        message = item.message
        if item.status == "pass" and len(message) > PASS_MESSAGE_CHARS:
            message = message[: PASS_MESSAGE_CHARS - 1] + "…"
        why = Text(message)
        if item.status != "pass":
            hint = rubric.item(item.id).hints[0]
            why.append(f"\nhint: {hint} (more: kata hint {item.id})", style="cyan")
        table.add_row(Text(label, style=style), item.id,
                      f"{item.points:g}/{item.max_points:g}", why)
    return table


def _tells(result: GradeResult, rubric: rubric_data.Rubric) -> Panel:
    lines = []
    for tell in result.tells:
        info = rubric.tell(tell.id)
        if tell.detected:
            lines.append(Text.assemble(("DETECTED ", "bold red"), (tell.id, "bold"),
                                       f" (caps the level at {info.caps}): {tell.message}"))
        else:
            lines.append(Text.assemble(("clear    ", "green"), tell.id, f": {tell.message}",
                                       style="dim" if tell.message.startswith("not checked") else ""))
    return Panel(Group(*lines), title="Down-level tells", title_align="left")


def _interviewer(rubric: rubric_data.Rubric) -> Panel:
    lines = [Text(f"[ ] {item.prompt}") for item in rubric.interviewer]
    return Panel(Group(*lines), title="For the interviewer to mark (no test can judge these)",
                 title_align="left")


def _summary(result: GradeResult) -> Text:
    style = "bold green" if result.passed else "bold"
    label = "Track: " if result.track == SERVING else "Level: "
    text = Text.assemble((label, "bold"), (result.level, style),
                         f"    Score: {result.score:g}/{result.max_score:g}")
    if result.caps:
        text.append(f"    (capped by tells at {min(result.caps)})", style="red")
    if result.hidden:
        text.append("    hidden graders included", style="dim")
    if result.grader_broke:
        text.append("\nThe grader itself broke on some item (exit code 4): not the candidate's fault.",
                    style="bold red")
    return text


def render_summary(result: GradeResult, console: Console) -> None:
    """A few lines for --watch: the level, the score, and each item that does not pass."""
    for item in result.items:
        if item.status != "pass":
            label, style = STATUS_STYLE[item.status]
            first_line = item.message.splitlines()[0] if item.message else ""
            console.print(Text.assemble((f"{label:8}", style), f"{item.id}: ", first_line[:150]))
    console.print(_summary(result))


def render_rubric(console: Console) -> None:
    """The rubric: items by level with points and what each checks, then tells and discussion."""
    rubric = rubric_data.load()
    for level in (*rubric.levels, SERVING):
        items = [i for i in rubric.items if i.level == level]
        title = "serving track (kata grade --track serving)" if level == SERVING else level
        table = Table(title=f"{title}  ({sum(i.points for i in items):g} points)",
                      title_justify="left", expand=True, header_style="bold")
        table.add_column("item", width=22, no_wrap=True)
        table.add_column("pts", justify="right", width=4)
        table.add_column("what passes", ratio=1)
        for item in items:
            table.add_row(item.id, f"{item.points:g}", Text(f"{item.title}. {item.checks}"))
        console.print(table)
    tells = Table(title="Down-level tells", title_justify="left", expand=True, header_style="bold")
    tells.add_column("tell", width=22, no_wrap=True)
    tells.add_column("caps", width=4)
    tells.add_column("what it is", ratio=1)
    for tell in rubric.tells:
        tells.add_row(tell.id, tell.caps, Text(tell.message))
    console.print(tells)
    console.print(_interviewer(rubric))
