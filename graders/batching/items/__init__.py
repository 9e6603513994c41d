"""The batching track's items: one file per rubric item, `ITEM`, `grade(candidate)` and
`grade_hidden(candidate)` (graders.judge.grade finds them here by name)."""
