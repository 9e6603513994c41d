"""Showing a grade: the rich report for people, the JSON of the contract for machines.

Every message can quote the candidate (contract section 5), so each is shown as
graders.shared.untrusted.quote makes it: control characters, escape sequences and bidi controls
escaped, at most MAX_QUOTE characters. In the terminal, every line of a message (an item's, a
tell's, why items were not run) is indented under the line that introduces it: a line at column 0
is always the kata's own, and a message cannot print a closing block of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection
from pathlib import Path

from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from graders.formats import causes
from graders.judge.result import GradeResult, ItemResult
from graders.judge.isolation import PROCESS_FALLBACK_NOTE
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.untrusted import printable, quote

INDENT = 4  # columns a quoted message stands in from the line that introduces it
SCREEN_LINES = 45  # a report's lines that a terminal shows at once (with the line that leads it)
STATUS_STYLE = {
    "pass": ("PASS", "green"),
    "fail": ("FAIL", "red"),
    "error": ("ERROR", "red"),
    "timeout": ("TIMEOUT", "yellow"),
    "not_attempted": ("TODO", "dim"),
}
# The L6+ group's one line while no L6+ item was attempted (GradeResult.plus_started).
PLUS_NOT_STARTED = "not started (kata rubric lists them)"


def to_json(result: GradeResult) -> dict:
    """The report as the contract's JSON (section 3, v1.1): `level` is null for a partial run;
    an item the worker could not run gives the worker's reason in its message, in one line.
    Every message and the implementation's name are as `quote` shows them (printable, at most
    MAX_QUOTE characters), so the file is valid UTF-8 whatever the candidate sent."""
    lead_of = causes.cause_of(result)
    return {
        "implementation": printable(result.implementation),
        "level": result.level,
        "score": result.score,
        "max_score": result.max_score,
        "plus_score": result.plus_score,
        "plus_max_score": result.plus_max_score,
        "items": [
            {
                "id": i.id,
                "level": i.level,
                "status": i.status,
                "points": i.points,
                "max_points": i.max_points,
                "message": quote(i.full_message),
                "cause": lead_of.get(i.id),
            }
            for i in result.items
        ],
        "tells": [
            {"id": t.id, "detected": t.detected, "message": quote(t.message)} for t in result.tells
        ],
        "hidden": result.hidden,
        "isolation": result.isolation,
        "partial": result.partial,
        "seed": result.seed,
        "similarity": result.similarity,
    }


def write_json(result: GradeResult, path: Path) -> None:
    from graders.shared.output_files import write_atomically

    write_atomically(path, json.dumps(to_json(result), indent=2) + "\n")


def render(
    result: GradeResult,
    console: Console,
    detail: str = "default",
    command: str = "kata grade",
    first: Collection[str] = (),
) -> None:
    """The report at a `detail`, each ending with the closing block (`closing`, where
    `command` is how to grade this file again):

    - "quiet" (-q): the closing block alone.
    - "brief" (--watch): `render_summary`.
    - "default": a screen (`_print_causes`): one line a level, then each cause of what does
      not pass once (graders.formats.causes); then the detected tells, one each, and one line
      for the others (clear or not checked).
    - "verbose" (-v): the items grouped by level in rubric order, each with its message under
      it, passes too, and every tell's.

    `first` (--ff: the items that did not pass last time, graded first): their causes come
    first; in "verbose", they are shown first, in a group of their own, and left out of their
    levels' groups. A hidden run is read by an interviewer: its "default" is "verbose", and it
    adds the interviewer-only items as a checklist. Messages wrap at spaces, and are cut only in
    a cause given in one line past the screen; each is at most MAX_QUOTE characters."""
    if detail == "brief":
        render_summary(result, console, command, first)
        return
    grouped = detail != "quiet" and not (detail == "verbose" or result.hidden)
    if detail != "quiet":
        rubric = rubric_data.load()
        verbose = not grouped
        tells = (
            (_tells(result, rubric) if verbose else _tell_lines(result, rubric))
            if tracks.get(result.track).levels
            else None
        )
        if grouped:
            _print_causes(result, console, rubric, first, tells, command)
        else:
            _print_levels(result, console, rubric, first)
        if tells is not None:
            console.print(tells)
        if result.hidden:
            console.print(_interviewer(rubric.interviewer_of(tracks.get(result.track))))
        console.rule(characters=_rule_character(console), style="dim")
    print_closing(result, console, command, grouped)


def _rule_character(console: Console) -> str:
    # rich draws a rule without a title in "─" even where the encoding cannot show it
    return "-" if console.options.ascii_only else "─"


def _print_levels(
    result: GradeResult, console: Console, rubric: rubric_data.Rubric, first: Collection[str]
) -> None:
    """Every item in full (-v, and a hidden run): items grouped by level, each with its
    message; an item an earlier cause explains says which, instead of its likely mistake."""
    lead_of = causes.cause_of(result)
    ahead = [i for i in result.items if i.id in first]
    if ahead:
        console.print(
            _level_lines(
                f"Graded first: did not pass last time  ({_points(ahead)})",
                ahead,
                rubric,
                True,
                lead_of,
            )
        )
    for level, title, _ in tracks.groups(rubric.levels):
        items = [i for i in result.items if i.level == level]
        if items and level == rubric_data.PLUS and not result.plus_started:
            console.print(Text.assemble((title, "bold"), "  ", (PLUS_NOT_STARTED, "dim")))
        elif items:
            console.print(
                _level_lines(
                    f"{title}  ({_points(items)})",
                    [i for i in items if i.id not in first],
                    rubric,
                    True,
                    lead_of,
                )
            )


def _print_causes(
    result: GradeResult,
    console: Console,
    rubric: rubric_data.Rubric,
    first: Collection[str],
    tells: Group | Panel | None,
    command: str,
) -> None:
    """The default report: one line a level (its points and the items that pass), then the
    causes of what does not pass (graders.formats.causes), each once: its lead item's status,
    message and first hint, and the items it takes down in one line with their points. The
    report keeps to SCREEN_LINES: when the causes in full would not fit, the last ones are
    given in a line each (the first line of the lead's message), for -v to show whole."""
    found = causes.causes(result, frozenset(first))
    head = _level_summary(result, rubric)
    fixed = [head, *([tells] if tells is not None else []), closing(result, command, True)]
    # the rule above the closing block, and its command's line (printed whole: one line)
    used = sum(_height(console, r) for r in fixed) + 1 + len(_command_lines(result, command))
    full = [_cause_block(c, rubric) for c in found]
    short = [_cause_line(c, console.width) for c in found]
    used += sum(_height(console, r) for r in short)
    # causes in full: the first always, then while the screen holds them, less the line that
    # leads the report and the note that follows causes given in a line
    fits = 0
    for n in range(len(found)):
        extra = _height(console, full[n]) - _height(console, short[n])
        if n and used + extra > SCREEN_LINES - 2:
            break
        used, fits = used + extra, n + 1
    console.print(head)
    for block in full[:fits] + short[fits:]:
        console.print(block)
    if fits < len(found):
        console.print(
            Text("(one line a cause past the screen: -v shows every message whole)", style="dim")
        )


def _height(console: Console, renderable) -> int:
    """Lines `renderable` takes at the console's width."""
    return len(console.render_lines(renderable, console.options, pad=False))


def _level_summary(result: GradeResult, rubric: rubric_data.Rubric) -> Table:
    """One line a level (wrapped under itself): its points and the items that pass, or, when
    fewer do not, the items that do not. L6+ not started is said at the end of the line before
    it, so that a report of L4-L6 keeps its length (issue 44's bound)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column()
    rows: list[tuple[str, Text]] = []
    for level, title, _ in tracks.groups(rubric.levels):
        items = [i for i in result.items if i.level == level]
        if items and level == rubric_data.PLUS and not result.plus_started:
            note = f"{title} {PLUS_NOT_STARTED}"
            if rows:
                rows[-1][1].append(f"; {note}", style="dim")
            else:
                rows.append((title, Text(PLUS_NOT_STARTED, style="dim")))
        elif items:
            passing = [i.id for i in items if i.status == "pass"]
            others = [i.id for i in items if i.status != "pass"]
            what = (
                "all pass"
                if not others
                else "none pass"
                if not passing
                else f"all pass but {', '.join(others)}"
                if len(others) < len(passing)
                else f"pass: {', '.join(passing)}"
            )
            rows.append(
                (f"{title}  {_points(items)}", Text(what, style="green" if passing else "dim"))
            )
    for label, text in rows:
        grid.add_row(label, text)
    return grid


def _cause_block(cause: causes.Cause, rubric: rubric_data.Rubric) -> Group:
    """A cause in full: its lead's line, message and first hint (none for an item the worker
    could not run, nor one not attempted or hung: its message says what to write or that the
    code never returned, which the item's hint is not about), then the items it takes down, in
    one line."""
    lead = cause.lead
    why = [Text(quote(lead.message), overflow="fold")]
    if not lead.unavailable and lead.status not in ("not_attempted", "timeout"):
        why.append(_hint(lead, rubric))
    if cause.members:
        why.append(_members(cause))
    return Group(_item_line(lead), _under(*why))


def _cause_line(cause: causes.Cause, width: int) -> Group:
    """A cause past the screen: its lead's line, with what it saw cut at a space to fit one
    line of `width` columns, and how many items it takes down."""
    first_line = (quote(causes.evidence(cause.lead.message)).splitlines() or [""])[0]
    room = width - INDENT
    if len(first_line) > room:
        first_line = first_line[: room - 1].rsplit(" ", 1)[0] + " …"
    more = len(cause.members)
    after = f" (and {more} more item{'s' * (more != 1)})" if more else ""
    return Group(_item_line(cause.lead, after), _under(Text(first_line, no_wrap=True)))


def _members(cause: causes.Cause) -> Text:
    lost = sum(i.max_points - i.points for i in cause.members)
    named = ", ".join(f"{i.id} {i.points:g}/{i.max_points:g}" for i in cause.members)
    return Text(f"Also failing because of it ({lost:g} points): {named}", style="bold")


def _item_line(item: ItemResult, after: str = "") -> Text:
    label, style = STATUS_STYLE[item.status]
    return Text.assemble(
        "  ",
        (f"{label:<8}", style),
        f"{item.id:<23}",
        f"{item.points:g}/{item.max_points:g}".rjust(5),
        after,
    )


def _points(items: list[ItemResult]) -> str:
    return f"{sum(i.points for i in items):g}/{sum(i.max_points for i in items):g} points"


def _hint(item: ItemResult, rubric: rubric_data.Rubric) -> Text:
    return Text(f"hint: {rubric.item(item.id).hints[0]} (more: kata hint {item.id})", style="cyan")


def _quoted(text: str) -> Padding:
    """A message that may quote the candidate, escaped and bounded (`quote`), every line of it
    (wrapped ones too) INDENT columns in."""
    return _under(Text(quote(text), overflow="fold"))


def _under(*lines: Text) -> Padding:
    """`lines` INDENT columns in, under the line that introduces them."""
    return Padding(Group(*lines), (0, 0, 0, INDENT), expand=False)


def _level_lines(
    title: str,
    items: list[ItemResult],
    rubric: rubric_data.Rubric,
    verbose: bool = False,
    lead_of: dict[str, str] | None = None,
) -> Group:
    """A group of items: its title, then one line an item; under one that does not pass (under
    every one, `verbose`), its message and (unless the worker could not run it, or it passes)
    a hint, indented. An item `lead_of` puts under another item's cause shows its evidence,
    not its likely mistake, and names that cause instead of a hint."""
    lines: list = [Text(title, style="bold")]
    lead_of = lead_of or {}
    for item in items:
        lines.append(_item_line(item))
        if item.status != "pass" or (verbose and item.message):
            lead = lead_of.get(item.id, item.id)
            message = item.message if lead == item.id else causes.evidence(item.message)
            why = [Text(quote(message), overflow="fold")]
            if lead != item.id:
                why.append(Text(f"under the cause of {lead}: fix that first", style="cyan"))
            elif item.status != "pass" and not item.unavailable:
                why.append(_hint(item, rubric))
            lines.append(_under(*why))
    return Group(*lines)


def _tells(result: GradeResult, rubric: rubric_data.Rubric) -> Panel:
    """A line a tell: DETECTED with the level it caps, clear, or not checked (no item that
    looks for it ran); under each checked one, its message, indented."""
    lines: list = []
    for tell in result.tells:
        if tell.detected:
            caps = rubric.tell(tell.id).caps
            lines.append(
                Text.assemble(
                    ("DETECTED    ", "bold red"), (tell.id, "bold"), f" (caps the level at {caps}):"
                )
            )
        elif tell.checked:
            lines.append(Text.assemble(("clear       ", "green"), tell.id, ":"))
        else:
            lines.append(Text(f"not checked {tell.id}", style="dim"))
        if tell.checked:
            lines.append(_quoted(tell.message))
    return Panel(Group(*lines), title="Down-level tells", title_align="left")


def _tell_lines(result: GradeResult, rubric: rubric_data.Rubric) -> Group:
    """The tells in the default report: a line for each one detected, with the level it caps,
    and its message under it (or, when the lead of a cause above gave that evidence already,
    which one did); then one line naming the others, clear or not checked."""
    lines: list = []
    leads = [c.lead for c in causes.causes(result)]
    for tell in (t for t in result.tells if t.detected):
        said = next((i.id for i in leads if tell.message and tell.message in i.message), None)
        lines.append(
            Text.assemble(
                ("Down-level tell DETECTED: ", "bold red"),
                (tell.id, "bold"),
                f" (caps the level at {rubric.tell(tell.id).caps}):",
                f" what {said} found, above" if said else "",
            )
        )
        if not said:
            lines.append(_quoted(tell.message))
    clear = [t.id for t in result.tells if not t.detected and t.checked]
    unchecked = [t.id for t in result.tells if not t.checked]
    others = [f"clear ({', '.join(clear)})"] if clear else []
    if unchecked:
        others.append(f"not checked ({', '.join(unchecked)}: no item that looks for it ran)")
    if others:
        lead = "Other tells: " if lines else "Down-level tells: none detected; "
        lines.append(Text(lead + "; ".join(others), style="dim"))
    return Group(*lines)


def _interviewer(items: tuple[rubric_data.InterviewerItem, ...]) -> Panel:
    lines = [Text(f"[ ] {item.prompt}") for item in items]
    return Panel(
        Group(*lines),
        title="For the interviewer to mark (no test can judge these)",
        title_align="left",
    )


def print_closing(
    result: GradeResult, console: Console, command: str = "kata grade", grouped: bool = False
) -> None:
    """`closing`, then the command of its "Next:" line whole on a line of its own, never wrapped
    (so that it can be copied), however wide."""
    console.print(closing(result, command, grouped))
    for line in _command_lines(result, command):
        console.print(Text(line, style="cyan"), soft_wrap=True)


def closing(result: GradeResult, command: str = "kata grade", grouped: bool = False) -> Group:
    """The end of every report: in a hidden run, the similarity to the bundled solutions; the
    level and score (`_summary`); why items were not run, once, when the worker could not run
    them (the worker's reason indented under that line); the items that do not pass (their ids,
    or with `grouped`, after a report that gave their causes, the causes' leads and how many
    items each takes down); and, for the candidate (not in a hidden run), what to run next: for
    the lead of the first cause of what does not pass, its hint command and `command` (how to
    grade this file again) on that item alone -- the hint command alone when that item is all
    this run graded, so that "Next:" never names the command just run; after a partial run
    where every item passes, `command`, for the level; nothing after a full run that passes.
    A command to grade again is not in the group: `print_closing` prints it on its own line."""
    lines = [Text(similarity_line(result.similarity))] if result.similarity is not None else []
    lines.append(_summary(result))
    failing = [i.id for i in result.reported if i.status != "pass" and not i.unavailable]
    if result.unavailable:
        unrun = sum(1 for i in result.items if i.unavailable)
        lines += [Text(f"Items not run ({unrun}):", style="bold red"), _quoted(result.unavailable)]
    if failing and grouped:
        found = causes.causes(result)
        leads = ", ".join(c.lead.id + (f" (+{len(c.members)})" if c.members else "") for c in found)
        lines.append(
            Text.assemble(
                ("Not passing: ", "bold red"),
                f"{len(failing)} item{'s' * (len(failing) != 1)}, {len(found)} "
                f"cause{'s' * (len(found) != 1)}: {leads}",
            )
        )
    elif failing:
        lines.append(Text.assemble(("Not passing: ", "bold red"), ", ".join(failing)))
    if not result.hidden:
        next_step = _next_step(result, failing, command)
        lines += [Text(f"Next: {next_step[0]}", style="cyan")] if next_step else []
    return Group(*lines)


def _command_lines(result: GradeResult, command: str) -> list[str]:
    """The command that closing's "Next:" line leads to, if it names one."""
    if result.hidden:
        return []
    failing = [i.id for i in result.reported if i.status != "pass" and not i.unavailable]
    next_step = _next_step(result, failing, command)
    return [next_step[1]] if next_step and next_step[1] else []


def _next_step(
    result: GradeResult, failing: list[str], command: str
) -> tuple[str, str | None] | None:
    """What "Next:" says, and the command it leads to (printed whole on its own line)."""
    if failing:  # the first cause: its lead, whose hint and evidence the report gave
        failing = [causes.causes(result)[0].lead.id]
    if failing and [i.id for i in result.reported] == failing:
        return f"kata hint {failing[0]}", None
    if failing:
        return f"kata hint {failing[0]}, or grade it alone:", f"{command} --item {failing[0]}"
    if result.unavailable:
        return "fix that, then:", command
    if result.partial and result.items:
        return "grade every item, for the level:", command
    return None


def _summary(result: GradeResult) -> Text:
    """The closing block's first line: the level and score, and the cap when a tell lowered
    the level; for a partial run, which items pass and the points, with no level."""
    style = "bold green" if result.passed else "bold"
    if result.partial:
        earned, total = result.score + result.plus_score, result.max_score + result.plus_max_score
        text = Text.assemble(
            ("Partial run: ", "bold"),
            (partial_verdict(result.items), style),
            f"    ({earned:g}/{total:g} points)",
        )
    else:
        label = "Level: " if tracks.get(result.track).levels else "Track: "
        text = Text.assemble(
            (label, "bold"),
            (result.level, style),
            f"    Score: {result.score:g}/{result.max_score:g}",
        )
        if result.plus_started:
            text.append(f"    {rubric_data.PLUS}: {result.plus_score:g}/{result.plus_max_score:g}")
    if result.capped_by:
        text.append(f"    (capped at {result.level} by {', '.join(result.capped_by)})", style="red")
    if result.hidden:
        text.append(
            f"    hidden cases of seed {result.seed} (--seed {result.seed} replays them)",
            style="dim",
        )
    text.append(f"    isolation: {result.isolation}", style="dim")
    if result.isolation == "process" and result.hidden:  # an interviewer's: a stranger's file
        text.append(f"\n{PROCESS_FALLBACK_NOTE}", style="yellow")
    if result.grader_broke:
        text.append(
            "\nThe grader itself broke on some item (exit code 4): not the candidate's fault.",
            style="bold red",
        )
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


def similarity_line(similarity: list[dict]) -> str:
    """A hidden run's `similarity` (graders.judge.similarity) in one line for the interviewer, said to
    be information rather than a verdict."""
    shares = ", ".join(f"{s['solution']} {s['fraction']:.0%}" for s in similarity)
    return (
        "Similarity to the bundled solutions (the share of this file's code found in each, "
        f"names and layout aside): {shares}. For the interviewer to weigh: it changes no "
        "score."
    )


def _named(ids: list[str], one: str, many: str) -> str:
    if len(ids) == 1:
        return f"item {ids[0]} {one}"
    return f"items {', '.join(ids)} {many}" if len(ids) <= 4 else f"{len(ids)} items {many}"


def render_summary(
    result: GradeResult, console: Console, command: str = "kata grade", first: Collection[str] = ()
) -> None:
    """A few lines for --watch: a rule with the time (HH:MM:SS), then each cause of what does
    not pass (graders.formats.causes; those led by an item in `first`, graded first, ahead):
    its lead with the first line of its message (as `quote` shows it), wrapped under its label,
    never cut, and the items it takes down (those the worker could not run are left to the
    closing block, which says why once); then the closing block."""
    console.rule(time.strftime("%H:%M:%S"), align="left", style="dim")
    console.print(summary_lines(result, first))
    print_closing(result, console, command)


def summary_lines(result: GradeResult, first: Collection[str] = ()) -> Table:
    """A line for each cause: its lead's status, id and first line of its message, then the
    ids of the items it takes down (for --watch and an interview's save)."""
    lines = Table.grid(padding=(0, 1))
    lines.add_column(width=8, no_wrap=True)
    lines.add_column()
    for cause in causes.causes(result, frozenset(first)):
        label, style = STATUS_STYLE[cause.lead.status]
        first_line = (quote(cause.lead.message).splitlines() or [""])[0]
        also = f" (fails too: {', '.join(i.id for i in cause.members)})" if cause.members else ""
        lines.add_row(
            Text(label, style=style), Text(f"{cause.lead.id}: {first_line}{also}", overflow="fold")
        )
    return lines


def render_rubric(console: Console) -> None:
    """The rubric: items by level with points and what each checks, then tells and discussion."""
    rubric = rubric_data.load()
    for level, title, beside in tracks.groups(rubric.levels):
        items = [i for i in rubric.items if i.level == level]
        if beside:
            title += f" (kata grade --track {beside.id})"
        if level == rubric_data.PLUS:
            title += " (past L6, once L6 passes: points outside the 100)"
        table = Table(
            title=f"{title}  ({sum(i.points for i in items):g} points)",
            title_justify="left",
            expand=True,
            header_style="bold",
        )
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
    console.print(_interviewer(rubric.interviewer))
