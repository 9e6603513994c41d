"""The commands around a grade: a workspace (workspace), what `kata grade` grades (target), a
grade shown and written (grading), hints one step at a time (hints), re-grading on save (watch),
the items that did not pass last time (last_failed), a folder of submissions graded at once
(batch; the command: grade_all), and the reference solutions and their steps (solutions).

May import: graders.judge, graders.shared, graders.formats. Never a track."""
