"""budgets: every step within the limits of contract section 6, named at the first that is not.

Each step of each workload: at most max_num_seqs sequences scheduled and at most max_num_seqs
running; at most max_batched_tokens tokens in all; block ids in range(num_blocks); each table
covering start + tokens; no block written by two sequences, and no block written this step in
another scheduled sequence's table; start + tokens never past the tokens known; only requests
that have arrived and not finished, each once.

Public: the five public workloads; hidden: one of each kind drawn from the run's seed.
"""

from __future__ import annotations

from graders.batching import grading

ITEM = "budgets"

OFF_BY_ONE = "the budget checks (one over the limit)"
LIKELY = {  # each names where to look and what the trace shows, never the fix
    "seqs-by-one": OFF_BY_ONE,
    "tokens-by-one": OFF_BY_ONE,
    "running-by-one": OFF_BY_ONE,
    "cover": "the blocks a step's table covers (fewer than start + tokens)",
    "written-shared": "when a prefix block becomes shareable (it was shared in the step that computes it)",
    "past-known": "how many positions a step computes (past the last token known)",
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    steps = sum(run.found.steps for run in runs)
    return (
        f"{steps} steps over {len(runs)} workloads within max_num_seqs, "
        "max_batched_tokens and the pool, every table covering what it computes, no block "
        "written twice or read in the step that writes it"
    )


grade, grade_hidden = grading.graders(_judged)
