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

ITEM = "preemption"

LIKELY = {  # each names where to look and what the trace shows, never the fix
    "victim": "which running sequence is preempted (it arrived before another that kept running)",
    "start-in-preempting-step": "what a step that preempted admits (it started a waiting request)",
    "misread-after-restart": "where a restarted sequence computes from (it read its old table or position)",
    "stall-empty": "why a step schedules nothing (blocks held by sequences that do not run, or a waiting head that cannot fit)",
    "stall-max-steps": "what is preempted and restarted (the same sequences, again and again)",
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    run = next(run for run in runs if run.kind == "preemption")
    return (
        f"{run.case}: {run.found.preemptions} preemptions, each of the most recently "
        "arrived running sequence, none in a step that started a request; restarted "
        "sequences recomputed their exact tokens; no workload stalled"
    )


grade, grade_hidden = grading.graders(_judged)
