"""The commands around a grade: a workspace (workspace), hints one step at a time (hints),
re-grading on save (watch), and a folder of submissions graded at once (batch).

May import: graders.judge, graders.shared, graders.formats. Never a track."""
