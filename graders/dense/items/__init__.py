"""The dense track's items: one file per rubric item, `ITEM`, `grade(candidate)` and, with
hidden cases, `grade_hidden(candidate)` (graders.judge.grade finds them here by name)."""
