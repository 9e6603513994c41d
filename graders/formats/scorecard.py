"""The interviewer's scorecard: one page of Markdown for a hiring committee.

`write_markdown` writes, in order: a title naming the implementation and the date; the level
reached and the score, with the tells that capped the level when one lowered it (a partial run
has no level: it says which items pass); why items were not run, once, when the worker could not
run them; one table per level (id, title, status, points, reason: for an item another item's
failure explains (graders.formats.causes), "under <that item>" and what it saw, without its
likely mistake); the down-level tells, detected
ones first with the level each caps, then clear ones, then those not checked; the
interviewer-only items as a checklist with blanks; in a hidden run, the similarity to the bundled
solutions; and a Decision line with blanks.

Reasons, tell messages and why items were not run are the graders' messages, which can quote
the candidate's own output: every one is shortened (graders.shared.untrusted.quote), and each of its
lines is a code span (graders.shared.untrusted.markdown_code), the lines joined by `<br>`: it shows as
written, with no link, image, HTML or table cell of the candidate's, and cannot break its row.
The implementation's name, in the title, is a code span too.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

from graders.formats import causes
from graders.formats.report import PLUS_NOT_STARTED, partial_verdict, similarity_line
from graders.judge.result import GradeResult, ItemResult
from graders.judge.isolation import PROCESS_FALLBACK_NOTE
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.output_files import write_atomically
from graders.shared.untrusted import MAX_QUOTE, markdown_code, quote

PASS_REASON_CHARS = 100  # a pass needs a phrase on a one-page card; --json keeps every word
OTHER_REASON_CHARS = 300

STATUS_LABEL = {
    "pass": "pass",
    "fail": "**FAIL**",
    "error": "**ERROR**",
    "timeout": "**TIMEOUT**",
    "not_attempted": "not attempted",
}

ISOLATION = {"bwrap": "bubblewrap sandbox", "process": "process fallback (no sandbox)"}

_MARKDOWN_ACTIVE = re.compile(r"([\\|*`])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def write_markdown(result: GradeResult, path: Path) -> None:
    """Write the scorecard of `result` to `path`."""
    rubric = rubric_data.load()
    title = markdown_code(result.implementation) or "(unnamed)"
    lines = [f"# kvkata scorecard: {title}", "", _summary(result), ""]
    for level, _, _ in tracks.groups(rubric.levels):
        items = [i for i in result.items if i.level == level]
        if items and level == rubric_data.PLUS and not result.plus_started:
            lines += [f"## {level}: {PLUS_NOT_STARTED}", ""]
        elif items:
            lines += _level_table(level, items, rubric, causes.cause_of(result)) + [""]
    if tracks.get(result.track).levels:
        lines += ["## Down-level tells", ""] + _tells(result, rubric) + [""]
    lines += ["## For the interviewer to mark (no test can judge these)", ""]
    lines += [
        f"- [ ] {_inline(i.prompt)} — notes: ________"
        for i in rubric.interviewer_of(tracks.get(result.track))
    ]
    if result.similarity is not None:
        lines += ["", _inline(similarity_line(result.similarity))]
    lines += [
        "",
        "**Decision:** hire / no hire: ________ · level: ______ · "
        "interviewer: ________________ · date: __________",
        "",
    ]
    write_atomically(path, "\n".join(lines))


def _summary(result: GradeResult) -> str:
    verdict = (
        f"**Partial run: {partial_verdict(result.items)}**"
        if result.partial
        else f"**Level reached: {result.level}**"
    )
    parts = [date.today().isoformat(), verdict, f"score {result.score:g}/{result.max_score:g}"]
    if result.plus_started:
        parts.append(
            f"{rubric_data.PLUS} {result.plus_score:g}/{result.plus_max_score:g} (outside the 100)"
        )
    if result.capped_by:
        parts.append(f"capped at {result.level} by {', '.join(result.capped_by)}")
    if result.hidden:
        parts.append(f"hidden cases of seed {result.seed} (`--seed {result.seed}` replays them)")
    parts.append(f"isolation: {ISOLATION[result.isolation]}")
    text = " · ".join(parts)
    if result.isolation == "process":
        text += f"\n\n> {PROCESS_FALLBACK_NOTE}"
    if result.unavailable:
        text += f"\n\n> **Items not run:** {_quoted(result.unavailable)}"
    if result.grader_broke:
        text += "\n\n> **The grader itself broke on some item: not the candidate's fault.**"
    return text


def _level_table(
    level: str, items: list[ItemResult], rubric: rubric_data.Rubric, lead_of: dict[str, str]
) -> list[str]:
    earned = sum(i.points for i in items)
    total = sum(i.max_points for i in items)
    rows = [
        f"## {level} ({earned:g}/{total:g} points)",
        "",
        "| id | item | status | points | reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    for item in items:
        limit = PASS_REASON_CHARS if item.status == "pass" else OTHER_REASON_CHARS
        lead = lead_of.get(item.id, item.id)
        reason = _quoted(
            item.message if lead == item.id else f"under {lead}: {causes.evidence(item.message)}",
            limit,
        )
        rows.append(
            f"| `{item.id}` | {_inline(rubric.item(item.id).title)} "
            f"| {STATUS_LABEL[item.status]} | {item.points:g}/{item.max_points:g} "
            f"| {reason} |"
        )
    return rows


def _tells(result: GradeResult, rubric: rubric_data.Rubric) -> list[str]:
    lines = []
    for tell in sorted(result.tells, key=lambda t: (not t.detected, not t.checked)):
        info = rubric.tell(tell.id)
        if tell.detected:
            lines.append(
                f"- **DETECTED** `{tell.id}` ({_inline(info.title)}; caps the level at "
                f"{info.caps}): {_quoted(tell.message)}"
            )
        elif tell.checked:
            lines.append(f"- clear `{tell.id}`: {_quoted(tell.message)}")
        else:
            lines.append(f"- not checked `{tell.id}` (no item that looks for it ran)")
    return lines


def _quoted(text: str, limit: int = MAX_QUOTE) -> str:
    """A message that may quote the candidate as one line of Markdown, safe in a table cell: cut
    to `limit` characters (its end "…") and to what `quote` keeps, each line a code span, the
    lines joined by <br>."""
    shown = text if len(text) <= limit else text[: limit - 1] + "…"
    return "<br>".join(filter(None, map(markdown_code, quote(shown).split("\n"))))


def _inline(text: str) -> str:
    """The kata's own `text` (titles, prompts) as one line of Markdown that renders as written,
    even inside a table cell; control characters show as U+FFFD."""
    text = _MARKDOWN_ACTIVE.sub(r"\\\1", text.replace("&", "&amp;").replace("<", "&lt;"))
    return _CONTROL.sub("\ufffd", "<br>".join(text.splitlines()))
