"""A grade as a Gradescope autograder `results.json`.

Top level: `score`, `output` (the level reached and the tells that capped it -- or, for a
partial run, which items pass --, the score, ids of the tells detected, and why items were not
run when the worker could not run them), `visibility` "visible", `stdout_visibility` "hidden"
(the grader's stdout is for instructors), and `extra_data` holding `max_score`, `level` (null for
a partial run), `partial`, `plus_score` and `plus_max_score` (L6+, outside the 100): the spec
has no top-level `max_score` (Gradescope takes the total from the assignment's settings), so it
is stored there, not shown. The L6+ items are tests only once L6+ is started.

One test per graded item, numbered by its place in the rubric: `name` "<level> <id>: <title>",
`score`, `max_score`, `status` "passed" or "failed", `output` (for an item that did not pass,
first its cause in one line (graders.formats.causes): the item's own, or the item whose failure
explains it; then the message, and the item's first hint when it leads its cause and ran; an item another
cause explains shows what it saw without its likely mistake), `tags` [level], and `visibility`
"visible" -- or
"after_published" for every test when the grade includes the hidden graders, whose failure
messages describe hidden cases and must stay unseen until the grades are published.

Every message, and why items were not run, is as graders.shared.untrusted.quote shows it (escaped, at
most MAX_QUOTE characters): the file is valid UTF-8 and bounded whatever the candidate sent.
"""

from __future__ import annotations

import json
from pathlib import Path

from graders.formats import causes
from graders.formats.report import partial_verdict
from graders.judge.result import GradeResult
from graders.shared import rubric as rubric_data
from graders.shared.output_files import write_atomically
from graders.shared.untrusted import quote


def to_gradescope(result: GradeResult) -> dict:
    """The `results.json` object for `result`."""
    rubric = rubric_data.load()
    order = {item.id: n for n, item in enumerate(rubric.items, start=1)}
    lead_of = causes.cause_of(result)
    tests = []
    for item in result.reported:  # L6+ not started: no test each
        info = rubric.item(item.id)
        lead = lead_of.get(item.id)
        if lead is None:
            output = quote(item.full_message)
        elif lead == item.id:
            also = [m for m, cause in lead_of.items() if cause == item.id and m != item.id]
            output = (
                "Cause: this item's own failure"
                + (f", which also fails {', '.join(also)}" if also else "")
                + f".\n\n{quote(item.full_message)}"
            )
            if not item.unavailable:
                output += f"\n\nHint: {info.hints[0]}"
        else:
            output = (
                f"Cause: {lead} fails, and this item relies on what it checks: fix "
                f"that first.\n\n{quote(causes.evidence(item.full_message))}"
            )
        tests.append(
            {
                "name": f"{item.level} {item.id}: {info.title}",
                "number": str(order[item.id]),
                "score": item.points,
                "max_score": item.max_points,
                "status": "passed" if item.status == "pass" else "failed",
                "output": output,
                "visibility": "after_published" if result.hidden else "visible",
                "tags": [item.level],
            }
        )
    return {
        "score": result.score,
        "output": _summary(result),
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "max_score": result.max_score,
            "level": result.level,
            "partial": result.partial,
            "plus_score": result.plus_score,
            "plus_max_score": result.plus_max_score,
        },
        "tests": tests,
    }


def _summary(result: GradeResult) -> str:
    if result.partial:
        lines = [f"Partial run: {partial_verdict(result.items)}"]
    else:
        capped = f" (capped at {result.level} by {', '.join(result.capped_by)})"
        lines = [f"Level reached: {result.level}" + (capped if result.capped_by else "")]
    detected = [t.id for t in result.tells if t.detected]
    lines += [
        f"Score: {result.score:g}/{result.max_score:g}"
        + (
            f" ({rubric_data.PLUS}: {result.plus_score:g}/{result.plus_max_score:g}, outside "
            "the 100)"
            if result.plus_started
            else ""
        ),
        f"Down-level tells detected: {', '.join(detected) or 'none'}",
    ]
    if result.unavailable:
        lines.append(f"Items not run: {quote(result.unavailable)}")
    return "\n".join(lines)


def write_gradescope(result: GradeResult, path: Path) -> None:
    """Write `to_gradescope(result)` to `path` as JSON."""
    write_atomically(path, json.dumps(to_gradescope(result), indent=2) + "\n")
