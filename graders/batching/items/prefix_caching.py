"""prefix-caching: prompt tokens computed at most the reference scheduler's on the same
shared-prefix workload; equal blocks after different prefixes never shared; a sharer arriving
after every earlier holder finished still hits the cache while its blocks were not needed.

With prefix_caching=True, every full block computed is identified by its tokens and every
token before it; a new sequence whose tokens begin with cached full blocks shares them and
starts after them; a cached block nobody holds stays reusable until its memory is needed. The
ledger of the kata's runner names a block read after another prefix; the prompt tokens computed
are counted from the trace and compared with the reference scheduler's on the same workload.

Public: the shared-prefix workload: four requests on a system prompt of 3 blocks of 8 arriving
two steps apart, one more long after every earlier one finished, and two requests whose blocks
equal another's blocks after a different prefix (one at another position, one at the same);
hidden: one drawn from the run's seed (system prompts of 2 to 5 blocks, 3 to 5 sharers). The
message reports the prompt tokens computed against the workload's unshared prompt tokens.
"""

from __future__ import annotations

from graders.batching import grading, workloads
from graders.batching.replay import name
from graders.shared.plans import Fail

ITEM = "prefix-caching"

LIKELY = {
    "other-prefix": "a block identified by its own tokens alone, without the tokens before it"
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    run = next(run for run in runs if run.kind == "shared-prefix")
    wrong = run.found.first.get("batch-equivalence")
    if wrong is not None and wrong.kind.startswith("misread"):
        raise Fail(
            f"{run.case}: {wrong.message}: a prefix cache gives a sequence exactly the "
            "K/V it would compute itself"
        )
    if run.found.stalled or run.found.unfinished:
        raise Fail(f"{run.case} did not finish: no prompt tokens to compare")
    got, reference = run.found.prompt_tokens, run.reference.prompt_tokens
    total = sum(len(r["prompt"]) for r in run.workload["requests"])
    unshared = workloads.unshared_prompt_tokens(run.workload)
    if run.found.prompt_tokens_computed > run.reference.prompt_tokens_computed:
        seq_id = max(got, key=lambda s: got[s] - reference[s])
        alone = _started_alone(run, seq_id)
        raise Fail(
            f"{run.case}: {run.found.prompt_tokens_computed} prompt tokens computed, the "
            f"reference scheduler {run.reference.prompt_tokens_computed} ({unshared} of the "
            f"{total} are unshared); request {name(seq_id)} computed {got[seq_id]} where the "
            f"reference computes {reference[seq_id]}"
            + (
                ": it started when nothing else was running, and the blocks it begins with were "
                "cached, held by no one. Likely mistake: what becomes of a cached block when its "
                "last holder finishes"
                if alone
                else ""
            )
        )
    return (
        f"{run.case}: {run.found.prompt_tokens_computed} prompt tokens computed of "
        f"{total}, as the reference scheduler ({unshared} unshared); no block shared after "
        "a different prefix"
    )


grade, grade_hidden = grading.graders(_judged)


def _started_alone(run: grading.Run, seq_id: str) -> bool:
    """Was `seq_id` the only sequence of the step it first ran in?"""
    for step in run.trace.steps:
        ids = [entry.seq_id for entry in step.batch]
        if seq_id in ids:
            return ids == [seq_id]
    return False
