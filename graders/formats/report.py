"""Showing a grade: the rich report for people, the JSON of the contract for machines."""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from graders import rubric as rubric_data
from graders import tracks
from graders.grade import GradeResult, ItemResult

STATUS_STYLE = {
    "pass": ("PASS", "green"),
    "fail": ("FAIL", "red"),
    "error": ("ERROR", "red"),
    "timeout": ("TIMEOUT", "yellow"),
    "not_attempted": ("TODO", "dim"),
}


def to_json(result: GradeResult) -> dict:
    """The report as the contract's JSON (section 3, v1.1): `level` is null for a partial run;
    an item the worker could not run gives the worker's reason in its message, in one line."""
    return {
        "implementation": result.implementation,
        "level": result.level,
        "score": result.score,
        "max_score": result.max_score,
        "items": [
            {"id": i.id, "level": i.level, "status": i.status, "points": i.points,
             "max_points": i.max_points, "message": i.full_message}
            for i in result.items
        ],
        "tells": [{"id": t.id, "detected": t.detected, "message": t.message} for t in result.tells],
        "hidden": result.hidden,
        "isolation": result.isolation,
        "partial": result.partial,
    }


def write_json(result: GradeResult, path: Path) -> None:
    from graders.output_files import write_atomically

    write_atomically(path, json.dumps(to_json(result), indent=2) + "\n")


def render(result: GradeResult, console: Console) -> None:
    """Why items were not run, when the worker could not run them (once, at the top); the items
    grouped by level; the tells; the interviewer-only items; the level (or, for a partial run,
    which items pass) and the score. Messages wrap, never cut."""
    rubric = rubric_data.load()
    if result.unavailable:
        console.print(Panel(Text(result.unavailable, overflow="fold"), title="Items not run",
                            title_align="left", border_style="red"))
    for level, title, _ in tracks.groups(rubric.levels):
        items = [i for i in result.items if i.level == level]
        if items:
            console.print(_level_table(title, items, rubric))
    if tracks.get(result.track).levels:
        console.print(_tells(result, rubric))
    console.print(_interviewer(rubric))
    console.print(_summary(result))


def _level_table(title: str, items, rubric: rubric_data.Rubric) -> Table:
    passed = sum(i.points for i in items)
    total = sum(i.max_points for i in items)
    table = Table(title=f"{title}  ({passed:g}/{total:g} points)", title_justify="left",
                  show_header=True, header_style="bold", expand=True)
    table.add_column("status", width=8, no_wrap=True)
    table.add_column("item", width=22, no_wrap=True)
    table.add_column("pts", justify="right", width=5, no_wrap=True)
    table.add_column("why", ratio=1)
    for item in items:
        label, style = STATUS_STYLE[item.status]
        why = Text(item.message, overflow="fold")
        if item.status != "pass" and not item.unavailable:
            hint = rubric.item(item.id).hints[0]
            why.append(f"\nhint: {hint} (more: kata hint {item.id})", style="cyan")
        table.add_row(Text(label, style=style), item.id,
                      f"{item.points:g}/{item.max_points:g}", why)
    return table


def _tells(result: GradeResult, rubric: rubric_data.Rubric) -> Panel:
    """One line a tell: DETECTED with the level it caps, clear, or not checked (no item that
    looks for it ran)."""
    lines = []
    for tell in result.tells:
        if tell.detected:
            caps = rubric.tell(tell.id).caps
            lines.append(Text.assemble(("DETECTED    ", "bold red"), (tell.id, "bold"),
                                       f" (caps the level at {caps}): {tell.message}"))
        elif tell.checked:
            lines.append(Text.assemble(("clear       ", "green"), tell.id, f": {tell.message}"))
        else:
            lines.append(Text(f"not checked {tell.id}", style="dim"))
    return Panel(Group(*lines), title="Down-level tells", title_align="left")


def _interviewer(rubric: rubric_data.Rubric) -> Panel:
    lines = [Text(f"[ ] {item.prompt}") for item in rubric.interviewer]
    return Panel(Group(*lines), title="For the interviewer to mark (no test can judge these)",
                 title_align="left")


def _summary(result: GradeResult) -> Text:
    """The closing line: the level and score, and the cap when a tell lowered the level; for a
    partial run, which items pass and the points, with no level."""
    style = "bold green" if result.passed else "bold"
    if result.partial:
        text = Text.assemble(("Partial run: ", "bold"), (partial_verdict(result.items), style),
                             f"    ({result.score:g}/{result.max_score:g} points)")
    else:
        label = "Level: " if tracks.get(result.track).levels else "Track: "
        text = Text.assemble((label, "bold"), (result.level, style),
                             f"    Score: {result.score:g}/{result.max_score:g}")
    if result.capped_by:
        text.append(f"    (capped at {result.level} by {', '.join(result.capped_by)})",
                    style="red")
    if result.hidden:
        text.append("    hidden graders included", style="dim")
    text.append(f"    isolation: {result.isolation}", style="dim")
    if result.grader_broke:
        text.append("\nThe grader itself broke on some item (exit code 4): not the candidate's fault.",
                    style="bold red")
    return text


def partial_verdict(items: list[ItemResult]) -> str:
    """Which items of a partial run pass and which do not: "items a, b pass; item c does not
    pass" (a count instead of the ids past four)."""
    passed = [i.id for i in items if i.status == "pass"]
    others = [i.id for i in items if i.status != "pass"]
    parts = [_named(passed, "passes", "pass")] if passed else []
    if others:
        parts.append(_named(others, "does not pass", "do not pass"))
    return "; ".join(parts) or "no items"


def _named(ids: list[str], one: str, many: str) -> str:
    if len(ids) == 1:
        return f"item {ids[0]} {one}"
    return f"items {', '.join(ids)} {many}" if len(ids) <= 4 else f"{len(ids)} items {many}"


def render_summary(result: GradeResult, console: Console) -> None:
    """A few lines for --watch: a rule with the time (HH:MM:SS), then why items were not run
    (once) or each item that does not pass with the first line of its message, wrapped, never
    cut; then the closing line of the report."""
    console.rule(time.strftime("%H:%M:%S"), align="left", style="dim")
    lines = Table.grid(padding=(0, 1))
    lines.add_column(width=8, no_wrap=True)
    lines.add_column()
    if result.unavailable:
        lines.add_row(Text("NOT RUN", style="red"), Text(result.unavailable, overflow="fold"))
    for item in (i for i in result.items if i.status != "pass" and not i.unavailable):
        label, style = STATUS_STYLE[item.status]
        first_line = (item.message.splitlines() or [""])[0]
        lines.add_row(Text(label, style=style), Text(f"{item.id}: {first_line}", overflow="fold"))
    if lines.row_count:
        console.print(lines)
    console.print(_summary(result))


def render_rubric(console: Console) -> None:
    """The rubric: items by level with points and what each checks, then tells and discussion."""
    rubric = rubric_data.load()
    for level, title, beside in tracks.groups(rubric.levels):
        items = [i for i in rubric.items if i.level == level]
        if beside:
            title += f" (kata grade --track {beside.id})"
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
