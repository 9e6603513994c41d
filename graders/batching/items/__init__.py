"""The batching track's items: one file per rubric item, `ITEM`, `grade(candidate)` and
`grade_hidden(candidate)` (graders.judge.grade finds them here by name), both made by
`graders.batching.grading.graders` of the file's own reading of the runs."""
