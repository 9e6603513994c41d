"""iteration-level: steps to finish each workload at most 1.1x the kata's reference scheduler's,
and at most 0.7x static batching's on the mixed workload.

Iteration-level scheduling (Orca, vLLM) admits new requests at every step as others finish;
static batching waits for the whole batch to end. The reference scheduler
(graders.batching.reference) follows contract section 6 and runs through the same driver on the
same workload; static batching is the same scheduler admitting only when nothing runs. The
steps counted are schedule() calls (idle time, when nothing is waiting or running, is not). A
workload that did not finish with every request's tokens has no step count to compare.

Public: the five public workloads (the mixed one: every request at step 0, one long output in
each wave of max_num_seqs); hidden: one of each kind drawn from the run's seed. The message
prints the three figures of the mixed workload.
"""

from __future__ import annotations

from graders.batching import grading
from graders.batching.replay import name
from graders.shared.plans import Fail

ITEM = "iteration-level"

OF_REFERENCE = 1.1
OF_STATIC = 0.7


def _judged(runs: list[grading.Run]) -> str:
    for run in runs:
        if run.found.stalled or run.found.unfinished:
            why = (
                "the scheduler stalled"
                if run.found.stalled
                else f"request {name(run.found.unfinished[0])} did not get all its tokens"
            )
            raise Fail(f"{run.case} did not finish ({why}): no step count to compare")
    for run in runs:
        steps, reference = run.found.steps, run.reference
        if steps > OF_REFERENCE * reference.steps:
            raise Fail(
                f"{run.case}: {steps} steps, more than {OF_REFERENCE}x the reference "
                f"scheduler's {reference.steps} (static batching: "
                f"{reference.static_steps}). Likely mistake: when waiting requests are "
                "admitted, and how full a step is"
            )
    mixed = next(run for run in runs if run.kind == "mixed")
    steps, reference = mixed.found.steps, mixed.reference
    ratio = steps / reference.static_steps
    figures = (
        f"{steps} steps, the reference scheduler {reference.steps}, static batching "
        f"{reference.static_steps} ({ratio:.2f}x static)"
    )
    if ratio > OF_STATIC:
        raise Fail(
            f"{mixed.case}: {figures}, more than {OF_STATIC}x static batching's. Likely "
            "mistake: static batching (new requests wait for the whole batch to finish)"
        )
    return f"{mixed.case}: {figures}; every workload within {OF_REFERENCE}x the reference"


grade, grade_hidden = grading.graders(_judged)
