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
from graders.judge.candidate import Candidate
from graders.shared.plans import NotAttempted

ITEM = "block-accounting"

LIKELY = {
    "free-count-low": "blocks not given back when a sequence finishes or is preempted (a "
                      "leak), or a count that misses what was given back",
    "free-count-high": "a block freed twice, or given back while a table still holds it",
    "free-count-low-by-one": "num_free_blocks off by one, or one block not given back",
    "free-count-high-by-one": "num_free_blocks off by one, or one block given back twice",
    "not-free-at-end": "a finished sequence's blocks never freed",
}


def grade(candidate: Candidate) -> str:
    return _grade(grading.runs(candidate, hidden=False))


def grade_hidden(candidate: Candidate) -> str:
    return _grade(grading.runs(candidate, hidden=True))


def _grade(runs: list[grading.Run]) -> str:
    grading.settle(runs)
    if any(step["free_after_schedule"] is None or step["free_after_update"] is None
           for run in runs for step in run.trace["steps"]):
        raise NotAttempted("`num_free_blocks` still raises NotImplementedError")
    grading.first(runs, ITEM, LIKELY)
    readings = sum(2 * run.found.steps for run in runs)
    return (f"num_free_blocks true at all {readings} readings of {len(runs)} workloads, "
            "every block free at the end")
