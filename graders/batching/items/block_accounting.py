"""block-accounting: no leak, no double free, every block free at the end, num_free_blocks true
at every step.

After every schedule() and every update(), num_free_blocks must equal num_blocks minus the
blocks in the tables of the sequences still running (a prefix-cached block nobody holds counts
as free); a finished sequence's blocks are free for the next step, a preempted one's at once;
once every request is done the whole pool is free.

Public: the five public workloads; hidden: one of each kind drawn from the run's seed.
"""

from __future__ import annotations

from graders.batching import grading
from graders.shared.plans import NotAttempted

ITEM = "block-accounting"

LIKELY = {  # each names where to look and what the trace shows, never the fix
    "free-count-low": "where blocks go back to the pool (fewer are free than the tables leave)",
    "free-count-high": "where blocks go back to the pool (more are free than the tables leave)",
    "free-count-low-by-one": "num_free_blocks (one fewer than the tables leave)",
    "free-count-high-by-one": "num_free_blocks (one more than the tables leave)",
    "not-free-at-end": "what becomes of a finished sequence's blocks (they were still held at the end)",
}


def _judged(runs: list[grading.Run]) -> str:
    if any(
        step.free_after_schedule is None or step.free_after_update is None
        for run in runs
        for step in run.trace.steps
    ):
        raise NotAttempted("`num_free_blocks` still raises NotImplementedError")
    grading.first(runs, ITEM, LIKELY)
    readings = sum(2 * run.found.steps for run in runs)
    return (
        f"num_free_blocks true at all {readings} readings of {len(runs)} workloads, "
        "every block free at the end"
    )


grade, grade_hidden = grading.graders(_judged)
