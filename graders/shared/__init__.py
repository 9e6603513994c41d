"""What every track uses: the vocabulary of a grader and the checking library.

    tracks.py        what a track is: its files, its items package, how it is graded
    plans.py         what a grader sends the candidate's code (Plan) and hears back (Results),
                     and how it says what it found (Fail, NotAttempted, CandidateError, ...)
    cases.py         seeded inputs; hidden_cases.py: hidden cases' seeds and names
    compare.py       comparison with the reference, tolerances and named mistakes
    reference.py     the float64 reference: causal attention, RoPE, an attention layer
    tolerances.py    measures the error of correct code per dtype (the tolerances' evidence)
    rubric.py        the rubric's data (rubric/rubric.toml): items, points, hints
    mutation.py      a file with one statement edited (mistakes, disguises)
    untrusted.py     candidate text made safe for every format
    output_files.py  writing a report or file where the user asked, safely
    bundled.py       where the kata's own files are (starter, solutions, rubric)

May import: graders.worker (the wire's types) and nothing else of graders: no track, not the
judge (a grader's candidate is anything with `run(plan)`: plans.PlanRunner).
"""
