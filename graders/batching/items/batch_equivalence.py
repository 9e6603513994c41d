"""batch-equivalence: every request's tokens equal its greedy decoding alone.

Public: the five public workloads (graders.batching.workloads): staggered arrivals with EOS,
mixed lengths all at once, a pool small enough to force preemption, a prompt several times the
token budget, and a prefix-cached system prompt. The kata's model (graders.batching.model) runs
every step the scheduler returns, writing K and V where its tables say and reading through them;
each slot's ledger names a table that points at wrong data (a freed and reused block, another
request's block, a block shared across different prefixes) by request and position even where
the token happens not to change. update() must return each request finished on the step of its
last token (max_new_tokens, or its eos, which counts as output), and every request must get all
its tokens before has_work() turns false.

Hidden: one workload of each kind, sizes and tokens drawn from the run's seed.
"""

from __future__ import annotations

from graders.batching import grading

ITEM = "batch-equivalence"

LIKELY = {  # each names where to look and what the trace shows, never the fix
    "finished-early": "when a sequence counts as finished (it ended before its tokens were all produced)",
    "finished-late": "when a sequence counts as finished (it went on past its last token)",
    "misread": "which blocks a table points at (a step read what another sequence, or the sequence before a restart, wrote)",
    "misread-other-prefix": "what identifies a prefix-cache block (equal blocks after different prefixes were shared)",
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    requests = sum(len(run.workload["requests"]) for run in runs)
    tokens = sum(len(tokens) for run in runs for tokens in run.workload["oracle"].values())
    return (
        f"all {requests} requests of {len(runs)} workloads produced exactly their greedy "
        f"decoding alone ({tokens} tokens), every slot read holding the right data"
    )


grade, grade_hidden = grading.graders(_judged)
