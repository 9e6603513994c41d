"""A grade as a Gradescope autograder `results.json`.

Top level: `score`, `output` (level reached, score, ids of the tells detected), `visibility`
"visible", `stdout_visibility` "hidden" (the grader's stdout is for instructors), and
`extra_data` holding `max_score` and `level`: the spec has no top-level `max_score` (Gradescope
takes the total from the assignment's settings), so it is stored there, not shown.

One test per graded item, numbered by its place in the rubric: `name` "<level> <id>: <title>",
`score`, `max_score`, `status` "passed" or "failed", `output` (the message, and the item's first
hint when it did not pass), `tags` [level], and `visibility` "visible" -- or "after_published"
for every test when the grade includes the hidden graders, whose failure messages describe hidden
cases and must stay unseen until the grades are published.
"""

from __future__ import annotations

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
        "output": summary,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"max_score": result.max_score, "level": result.level},
        "tests": tests,
    }


def write_gradescope(result: GradeResult, path: Path) -> None:
    """Write `to_gradescope(result)` to `path` as JSON."""
    path.write_text(json.dumps(to_gradescope(result), indent=2) + "\n")
