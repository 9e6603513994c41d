"""A grade as a Gradescope autograder `results.json`.

Top level: `score` and `max_score` (the rubric's points), `output` (level reached, score, tells
detected), `visibility` "visible", `stdout_visibility` "hidden" (the grader's stdout is for
instructors). One test per rubric item, numbered in rubric order: `name` "<level> <id>: <title>",
`score`, `max_score`, `status` "passed" or "failed", `output` (the message, and the item's first
hint when it did not pass), `tags` [level], and `visibility` "visible" -- or "after_published"
for every test when the grade includes the hidden graders, whose failure messages describe hidden
cases and must stay unseen until the grades are published.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from graders import rubric as rubric_data
from graders.grade import GradeResult


def to_gradescope(result: GradeResult) -> dict:
    """The `results.json` object for `result`."""
    rubric = rubric_data.load()
    order = {item.id: n for n, item in enumerate(rubric.items, start=1)}
    detected = [t.id for t in result.tells if t.detected]
    summary = (f"Level reached: {result.level}\nScore: {result.score:g}/{result.max_score:g}\n"
               f"Down-level tells detected: {', '.join(detected) or 'none'}")
    tests = []
    for item in result.items:
        info = rubric.item(item.id)
        output = item.message if item.status == "pass" else f"{item.message}\n\nHint: {info.hints[0]}"
        tests.append({
            "name": f"{item.level} {item.id}: {info.title}",
            "number": str(order[item.id]),
            "score": item.points,
            "max_score": item.max_points,
            "status": "passed" if item.status == "pass" else "failed",
            "output": output,
            "visibility": "after_published" if result.hidden else "visible",
            "tags": [item.level],
        })
    return {
        "score": result.score,
        "max_score": result.max_score,
        "output": html.escape(summary),  # the top-level output renders as HTML ("simple_format")
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "tests": tests,
    }


def write_gradescope(result: GradeResult, path: Path) -> None:
    """Write `to_gradescope(result)` to `path` as JSON."""
    path.write_text(json.dumps(to_gradescope(result), indent=2) + "\n")
