"""`kata interview` (contract section 7): the kata asked as the interview it practises.

- questions: what the interviewer says: each stage's prompt, the conceptual questions, the
  model answers.
- record: DIR/.kata/session.json, its snapshots and the lock that keeps one session a workspace.
- session: the scriptable verbs (start, save, hint, end), with a clock a test can set.
- review: what an interviewer reads afterwards: the report (terminal, Markdown, JSON, PNG) and
  the replay of every snapshot.
- live: the interactive verb, which shows the stage and watches the files, made of the others.
"""
