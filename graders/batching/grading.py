"""What the batching items share: one drive of the candidate's scheduler per workload within a
grade, its replay, and the reference figures it is compared with.

The eight items of contract section 6 judge the same runs: `runs(candidate, hidden)` sends one
plan, a `drive_scheduler` operation per workload (public: workloads.public(); hidden: one of
each kind drawn from the run's seed), replays each trace (graders.batching.replay) and keeps the
result, or the exception the candidate's worker gave, for the candidate (a grade runs its items
in one process, one after the other): the eight items drive once. The kata's reference
scheduler runs through the same driver in-process, as does static batching (the reference
admitting only when nothing runs), once a workload, its trace checked as a worker's is.

`graders(judge)` makes an item's `grade` and `grade_hidden` of its own reading of the runs.
`settle(runs)` turns what stopped a drive into the item's verdict: NotImplementedError is
NotAttempted (the untouched starter), another exception of the scheduler's a CandidateError
naming the call, the step and the candidate's line, a value outside the contract a Fail.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from graders.batching import workloads
from graders.batching.reference import ReferenceScheduler, Request
from graders.batching.replay import Findings, replay
from graders.judge.candidate import Candidate, last_candidate_line
from graders.judge.replies import drive_trace
from graders.shared import hidden_cases
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted, Plan
from graders.worker.batching import Trace, drive

HIDDEN_SEED = 3400  # the hidden workloads' offset from the run's seed
STEPS_PER_STATIC = 3  # a drive stops after this many times static batching's steps (+ SLACK)
SLACK = 16


@dataclass(frozen=True)
class Figures:
    """The reference scheduler's figures on a workload, and static batching's steps."""

    steps: int
    prompt_tokens: dict[str, int]
    prompt_tokens_computed: int
    static_steps: int

    @property
    def max_steps(self) -> int:
        return STEPS_PER_STATIC * self.static_steps + SLACK


@dataclass(frozen=True)
class Run:
    """One workload's drive of the candidate: `case` names it in messages."""

    kind: str
    case: str
    workload: dict
    trace: Trace
    found: Findings
    reference: Figures


_RUNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # candidate -> {seed: runs}
_FIGURES: dict[tuple, Figures] = {}


def runs(candidate: Candidate, hidden: bool) -> list[Run]:
    """The candidate's runs on the public workloads, or on the hidden ones of this run's seed:
    driven once a grade, whichever item asks first."""
    seed = hidden_cases.seed(HIDDEN_SEED) if hidden else None
    kept = _RUNS.setdefault(candidate, {})
    if seed not in kept:
        try:
            kept[seed] = _drive(candidate, seed)
        except (CandidateError, CandidateTimeout, NotAttempted) as exc:
            kept[seed] = exc
    if isinstance(kept[seed], Exception):
        raise kept[seed]
    return kept[seed]


def graders(
    judge: Callable[[list[Run]], str],
) -> tuple[Callable[[Candidate], str], Callable[[Candidate], str]]:
    """An item's `grade` and `grade_hidden`: `judge` (the item's own reading of the runs: its
    message, or the verdict it raises) given the candidate's public or hidden runs, once
    `settle` found that no drive ended early."""

    def grade(candidate: Candidate) -> str:
        return _judged(judge, candidate, hidden=False)

    def grade_hidden(candidate: Candidate) -> str:
        return _judged(judge, candidate, hidden=True)

    return grade, grade_hidden


def _judged(judge: Callable[[list[Run]], str], candidate: Candidate, hidden: bool) -> str:
    found = runs(candidate, hidden)
    settle(found)
    return judge(found)


def settle(runs_: list[Run]) -> None:
    """Raise what ended a drive early, for every item alike (see the module's docstring)."""
    for run in runs_:
        error = run.trace.error
        if error is None:
            continue
        call = f"`{error.call}`" if error.call != "init" else "`Scheduler(...)`"
        if error.type == "NotImplementedError":
            raise NotAttempted(f"{call} still raises NotImplementedError")
        where = f"{run.case}, step {error.step}"
        if error.kind == "returned":
            raise Fail(f"{where}: {error.message}")
        line = last_candidate_line(error.traceback)
        raise CandidateError(
            f"{where}: {call} raised {error.type}: {error.message}{line}",
            signature=(error.type, error.message, line),
        )


def first(runs_: list[Run], rule: str, likely: dict[str, str] | None = None) -> None:
    """Fail with the first finding of `rule` in the runs, in workload order, its likely mistake
    named when `likely` knows its kind."""
    for run in runs_:
        finding = run.found.first.get(rule)
        if finding is not None:
            label = (likely or {}).get(finding.kind)
            raise Fail(
                f"{run.case}: {finding.message}" + (f". Likely mistake: {label}" if label else "")
            )


def _drive(candidate: Candidate, seed: int | None) -> list[Run]:
    if seed is None:
        drawn = [(kind, f"the {kind} workload", load) for kind, load in workloads.public()]
    else:
        drawn = [
            (kind, hidden_cases.name(kind_seed, f"a {kind} workload"), load)
            for kind, kind_seed, load in workloads.hidden(seed)
        ]
    figures = [_figures((seed, kind), load) for kind, _, load in drawn]
    plan = Plan()
    for (_, _, load), figure in zip(drawn, figures):
        plan.drive_scheduler(load, figure.max_steps)
    results = candidate.run(plan)
    return [
        Run(kind, case, load, results[n], replay(load, results[n]), figure)
        for n, ((kind, case, load), figure) in enumerate(zip(drawn, figures))
    ]


def _figures(key: tuple, load: dict) -> Figures:
    """The reference scheduler's figures on `load`, read off its trace (it breaks no rule:
    tests/test_batching_engine.py replays it), kept by `key`, which fixes the workload."""
    if key not in _FIGURES:
        bound = workloads.max_steps(load)
        static = drive_trace(
            drive(
                lambda **config: ReferenceScheduler(**config, static=True),
                load,
                bound,
                request_type=Request,
            ),
            load,
            bound,
        )
        trace = drive_trace(
            drive(ReferenceScheduler, load, bound, request_type=Request), load, bound
        )
        if trace.error or trace.stalled or static.error or static.stalled:
            raise RuntimeError(f"the reference scheduler did not finish {key}: the kata's bug")
        prompts = {r["id"]: len(r["prompt"]) for r in load["requests"]}
        computed = dict.fromkeys(prompts, 0)
        for step in trace.steps:
            for entry in step.batch:
                computed[entry.seq_id] += entry.prompt_positions(prompts[entry.seq_id])
        _FIGURES[key] = Figures(
            len(trace.steps), computed, sum(computed.values()), len(static.steps)
        )
    return _FIGURES[key]
