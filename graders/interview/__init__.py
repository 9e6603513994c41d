"""`kata interview` (contract section 7): the kata asked as the interview it practises.

- questions: what the interviewer says: each stage's prompt, the conceptual questions, the
  model answers.
- record: DIR/.kata/session.json, its snapshots and the lock (one session to a workspace).
- session: the scriptable verbs (start, save, hint, end), with a clock a test can set.
- review: what an interviewer reads afterwards: the report (terminal, Markdown, JSON, PNG) and
  the replay of every snapshot.
- page: the session as one HTML page (timeline, every snapshot, the final grade, the answers).
- commands: the verbs as the terminal shows them, cli.py's to call; the interactive one shows
  the stage and watches the files (graders.workflows.watch), made of the others.

May import: graders.judge, graders.shared, graders.formats, graders.workflows. Never a track.
"""
