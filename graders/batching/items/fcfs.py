"""fcfs: arrival order, head of line, no starvation.

Waiting requests start in arrival order (a preempted one goes back to the front of the queue):
none starts before an earlier one still waiting, and the head of the queue waits only while the
budgets or the free blocks keep it out. The judge keeps the contract's waiting queue from the
arrivals and the preemptions it reads off the trace; "kept out" is judged leniently: a head is
named only when a sequence slot and a token were left and the free blocks (by the judge's count
and by the scheduler's own) covered every token it knows.

Public: the five public workloads (the preemption one has a head of several blocks arriving
with a one-block request behind it as the pool fills); hidden: one of each kind drawn from the
run's seed.
"""

from __future__ import annotations

from graders.batching import grading

ITEM = "fcfs"

LIKELY = {  # each names where to look and what the trace shows, never the fix
    "queue-order": "the order of the waiting queue (a request started before an earlier one still waiting)",
    "head-kept-out": "what admission waits for (the head of the queue waited while the budgets and the free blocks had room)",
}


def _judged(runs: list[grading.Run]) -> str:
    grading.first(runs, ITEM, LIKELY)
    requests = sum(len(run.workload["requests"]) for run in runs)
    return (
        f"{requests} requests of {len(runs)} workloads started in arrival order, each as "
        "soon as the budgets and the free blocks let the head of the queue in"
    )


grade, grade_hidden = grading.graders(_judged)
