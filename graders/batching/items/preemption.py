"""preemption: victims as stated, no stall, no deadlock, exact tokens after a restart.

When the blocks the running sequences need this step are not free, the most recently arrived
running sequence is preempted (recompute: its blocks freed, back to the front of the waiting
queue), then the next most recent, until the rest fit; nothing starts in a step that preempted,
and a restarted sequence produces exactly the tokens it would have. The judge reads a
preemption off the trace: a running sequence left out of a step that later computes again from
an earlier position (or never comes back).

Public: the five public workloads, the preemption one a pool of 14 blocks of 4 for sequences
that grow past it together; hidden: one of each kind drawn from the run's seed, the pool
14 to 18 blocks. A stall (a step that schedules nothing while work waits, or a workload not
done after 3x static batching's steps) fails here too.
"""

from __future__ import annotations

from graders.batching import grading
from graders.judge.candidate import Candidate

ITEM = "preemption"

LIKELY = {
    "victim": "preempting the oldest running sequence (the one with the most work done), or "
              "the longest, instead of the most recently arrived",
    "start-in-preempting-step": "admission that does not know the step preempted (a step "
                                "short of blocks starts no waiting request)",
    "misread-after-restart": "a restart that keeps its old table or position instead of "
                             "computing again from its start",
    "stall-empty": "blocks that are never given back, or a waiting head that can never fit",
    "stall-max-steps": "preempting and restarting the same sequences forever",
}


def grade(candidate: Candidate) -> str:
    return _grade(grading.runs(candidate, hidden=False))


def grade_hidden(candidate: Candidate) -> str:
    return _grade(grading.runs(candidate, hidden=True))


def _grade(runs: list[grading.Run]) -> str:
    grading.settle(runs)
    grading.first(runs, ITEM, LIKELY)
    run = next(run for run in runs if run.kind == "preemption")
    return (f"{run.case}: {run.found.preemptions} preemptions, each of the most recently "
            "arrived running sequence, none in a step that started a request; restarted "
            "sequences recomputed their exact tokens; no workload stalled")
