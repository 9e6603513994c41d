"""chunked-prefill: long prompts chunked; running decodes go on every step.

A prompt longer than the tokens left in a step is computed in chunks over several steps, and
chunking never costs a running sequence its decode: every running sequence that can decode does,
before any prefill (a decode waits only when the decodes alone use up the token budget). A
running prefill continues before any waiting request starts.

Public: the five public workloads, the long-prompt one a prompt of 200 tokens against a budget
of 48 arriving while three requests decode; hidden: one of each kind drawn from the run's seed,
the prompt 150 to 300 tokens against a budget of 24 to 64.
"""

from __future__ import annotations

from graders.batching import grading

ITEM = "chunked-prefill"

LIKELY = {  # each names where to look and what the trace shows, never the fix
    "decode-left-out-for-prefill": "the order of a step's plan (running decodes waited while a prefill took the token budget)",
    "decode-left-out": "which running decodes a step plans (one was left out while the budgets had room)",
    "prefill-left-out-for-new": "the order of a step's plan (waiting requests started before the running prefills had their chunks)",
    "long-prompt-never-started": "how a prompt longer than the tokens left starts (it never did)",
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    run = next(run for run in runs if run.kind == "long-prompt")
    budget = run.workload["config"]["max_batched_tokens"]
    longest = max(len(r["prompt"]) for r in run.workload["requests"])
    return (
        f"{run.case}: a prompt of {longest} tokens computed in chunks of at most {budget}, "
        "the running decodes going on every step"
    )


grade, grade_hidden = grading.graders(_judged)
