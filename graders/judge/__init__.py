"""The judge: one grade of one file, and the machinery that keeps the candidate's code away.

    grade.py       one grade: the items of a track run against a candidate, their statuses, the
                   level, the tells; the items are found by name in each track's `items`
    candidate.py   `Candidate.run(plan)`: a plan sent to the implementation's worker, the reply
                   turned into Results or into what the candidate's code did on its own
    workers.py     the worker processes of a grade: started, reused, restarted, stopped
    isolation.py   the sandbox they run in (bubblewrap, or the process fallback) and its limits
    replies.py     the one place a worker's reply enters the judge: checked against its schema
    similarity.py  how much of a file is the bundled solution's (the report's similarity line)

May import: graders.shared, graders.worker (its wire, frames and limits: the protocol). Never a
track: grade.py loads the items of `graders.shared.tracks` by name, at run time.
"""
