"""The batching track: scheduler.py, the scheduler of a serving engine (contract section 6).

The candidate's Scheduler runs in a worker, driven by graders/worker/batching.py on a workload
(plain data); the judge replays the trace it records on the kata's own model and names the
first step that breaks each rule.

    model.py      the kata's decoder (seeded, GQA, RoPE), greedy decoding alone (the oracle),
                  and the paged runner with its slot ledger
    workloads.py  the public workloads and the hidden ones drawn from the run's seed
    replay.py     a trace replayed on the runner: Findings, the first of each rule, and figures
    reference.py  the kata's reference scheduler (and static batching), for the figures
    grading.py    what the items share: one drive per workload a grade, its replay, the figures
    items/        one file per batching rubric item

May import: torch, the standard library, graders.worker.batching (the driver), graders.shared,
and, in items/, graders.judge.candidate. Never another track (graders.dense, graders.serving).
"""
