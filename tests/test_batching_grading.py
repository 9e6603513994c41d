"""What the batching items share (graders.batching.grading), each part alone: `settle` turns
what stopped a drive into the verdict, `first` names a rule's first finding in workload order,
`runs` drives once a grade and keeps what stopped the worker, `_drive` sends one plan and names
each case, `_figures` reads the reference's figures off its trace. The workloads here are tiny
and their oracles made up: no item, no worker."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest

from graders.batching import grading, workloads
from graders.batching.replay import Findings, Finding
from graders.judge.replies import drive_trace
from graders.shared import hidden_cases
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted
from graders.worker.batching import DriveError, Trace

LOAD = {
    "config": {
        "num_blocks": 8,
        "block_size": 4,
        "max_num_seqs": 2,
        "max_batched_tokens": 4,
        "prefix_caching": False,
    },
    "requests": [
        {"id": "a", "prompt": [1, 2, 3, 4, 5, 6], "max_new_tokens": 2, "eos": None, "arrival": 0},
        {"id": "b", "prompt": [4, 5], "max_new_tokens": 1, "eos": None, "arrival": 1},
    ],
    "oracle": {"a": [7, 8], "b": [9]},
}


def error(
    call="update",
    step=3,
    kind="raised",
    type_="ValueError",
    message="no",
    traceback='  File "/home/me/scheduler.py", line 9, in update\n    raise ValueError\n',
):
    return DriveError(call, step, kind, type_, message, traceback)


def run_of(error_=None, case="the tiny workload"):
    return SimpleNamespace(trace=Trace((), (), error_, False), case=case)


# --- settle ---


def test_runs_without_an_error_settle_to_nothing():
    assert grading.settle([run_of(), run_of()]) is None


def test_a_scheduler_s_exception_is_an_error_naming_the_case_step_call_and_line():
    with pytest.raises(CandidateError) as raised:
        grading.settle([run_of(), run_of(error(), "the second workload")])
    assert str(raised.value) == (
        "the second workload, step 3: `update` raised ValueError: no "
        '(File "/home/me/scheduler.py", line 9, in update)'
    )
    assert raised.value.signature == (
        "ValueError",
        "no",
        ' (File "/home/me/scheduler.py", line 9, in update)',
    )


def test_an_item_s_graders_judge_the_public_and_the_hidden_runs_once_settled(monkeypatch):
    asked = []

    def runs(candidate, hidden):
        asked.append((candidate, hidden))
        return [run_of(case="hidden" if hidden else "public")]

    monkeypatch.setattr(grading, "runs", runs)
    grade, grade_hidden = grading.graders(lambda found: f"judged {found[0].case}")
    assert grade("me") == "judged public" and grade_hidden("me") == "judged hidden"
    assert asked == [("me", False), ("me", True)]
    monkeypatch.setattr(grading, "runs", lambda candidate, hidden: [run_of(error(), "a case")])
    with pytest.raises(CandidateError, match="^a case, step 3"):
        grade("me")


def test_the_first_run_s_error_is_the_one_raised():
    with pytest.raises(CandidateError, match="^the first, step 0: `add`"):
        grading.settle([run_of(error("add", 0), "the first"), run_of(error(), "the second")])


def test_a_value_outside_the_contract_fails_naming_the_case_and_step():
    returned = error("schedule", 2, "returned", "", "schedule() returned None, not a list", "")
    with pytest.raises(Fail) as failed:
        grading.settle([run_of(returned)])
    assert str(failed.value) == "the tiny workload, step 2: schedule() returned None, not a list"


@pytest.mark.parametrize(
    "call, named",
    [("init", "`Scheduler(...)`"), ("add", "`add`"), ("num_free_blocks", "`num_free_blocks`")],
)
def test_not_implemented_is_not_attempted_naming_the_call(call, named):
    with pytest.raises(NotAttempted) as stopped:
        grading.settle([run_of(error(call, 0, type_="NotImplementedError"))])
    assert str(stopped.value) == f"{named} still raises NotImplementedError"
    with pytest.raises(CandidateError) as raised:
        grading.settle([run_of(error(call, 0))])
    assert str(raised.value).startswith(f"the tiny workload, step 0: {named} raised ValueError")


# --- first ---


def found(rule=None, kind="leak", message="step 4: a leak"):
    findings = Findings()
    if rule is not None:
        findings.first[rule] = Finding(rule, kind, 4, "a", message)
    return SimpleNamespace(found=findings, case="the tiny workload")


def test_first_fails_with_the_first_run_s_finding_of_the_rule():
    runs = [found("fcfs"), found("budgets", message="step 4: over"), found("budgets")]
    with pytest.raises(Fail) as failed:
        grading.first(runs, "budgets")
    assert str(failed.value) == "the tiny workload: step 4: over"
    assert grading.first(runs, "preemption") is None


def test_first_names_a_likely_mistake_when_it_knows_the_kind():
    with pytest.raises(Fail) as failed:
        grading.first([found("budgets")], "budgets", {"leak": "a table never freed"})
    assert (
        str(failed.value) == "the tiny workload: step 4: a leak. Likely mistake: a table "
        "never freed"
    )
    with pytest.raises(Fail) as failed:
        grading.first([found("budgets")], "budgets", {"other": "no"})
    assert str(failed.value) == "the tiny workload: step 4: a leak"


# --- runs: one drive a grade, what stopped the worker kept ---


@pytest.fixture
def drives(monkeypatch):
    calls = []

    def fake(candidate, seed):
        calls.append(seed)
        if isinstance(candidate.stops, Exception):
            raise candidate.stops
        return [f"run of seed {seed}"]

    monkeypatch.setattr(grading, "_drive", fake)
    return calls


class Candidate:
    def __init__(self, stops=None):
        self.stops = stops


def test_runs_drive_once_a_grade_public_and_hidden_apart(drives):
    candidate = Candidate()
    assert grading.runs(candidate, False) == grading.runs(candidate, False) == ["run of seed None"]
    with hidden_cases.run_seed(100):
        assert grading.runs(candidate, True) == [f"run of seed {100 + grading.HIDDEN_SEED}"]
        grading.runs(candidate, True)
    assert drives == [None, 100 + grading.HIDDEN_SEED]
    grading.runs(Candidate(), False)
    assert drives[-1] is None and len(drives) == 3  # another candidate drives again


@pytest.mark.parametrize(
    "stops", [CandidateError("it broke"), CandidateTimeout("it hung"), NotAttempted("a stub")]
)
def test_what_stopped_the_worker_is_raised_for_every_item_and_asked_once(drives, stops):
    candidate = Candidate(stops)
    for _ in range(3):
        with pytest.raises(type(stops)) as raised:
            grading.runs(candidate, False)
        assert raised.value is stops
    assert drives == [None]


def test_the_kata_s_own_bug_is_not_kept_as_the_candidate_s(drives):
    candidate = Candidate(RuntimeError("the kata's bug"))
    for _ in range(2):
        with pytest.raises(RuntimeError):
            grading.runs(candidate, False)
    assert drives == [None, None]


# --- _drive and _figures ---


class Driving:
    """A candidate that runs its plan's drives on the kata's reference, in-process."""

    def __init__(self):
        self.plans = []

    def run(self, plan):
        from graders.batching.reference import ReferenceScheduler, Request
        from graders.worker.batching import drive

        self.plans.append(copy.deepcopy(plan.ops))
        return [
            drive_trace(
                drive(ReferenceScheduler, op["workload"], op["max_steps"], request_type=Request),
                op["workload"],
                op["max_steps"],
            )
            for op in plan.ops
        ]


def test_drive_sends_one_plan_naming_each_public_case(monkeypatch):
    other = copy.deepcopy(LOAD)
    other["config"]["max_batched_tokens"] = 8
    monkeypatch.setattr(workloads, "public", lambda: [("tiny", LOAD), ("wider", other)])
    candidate = Driving()
    runs = grading._drive(candidate, None)
    assert (
        len(candidate.plans) == 1
        and [op["op"] for op in candidate.plans[0]] == ["drive_scheduler"] * 2
    )
    assert [(r.kind, r.case) for r in runs] == [
        ("tiny", "the tiny workload"),
        ("wider", "the wider workload"),
    ]
    assert [r.workload for r in runs] == [LOAD, other]
    figures = [
        grading._figures((None, kind), load) for kind, load in (("tiny", LOAD), ("wider", other))
    ]
    assert [op["max_steps"] for op in candidate.plans[0]] == [f.max_steps for f in figures]
    assert [r.reference for r in runs] == figures
    assert runs[0].trace.error is None and runs[0].found.steps == len(runs[0].trace.steps)


def test_drive_names_each_hidden_case_by_its_seed(monkeypatch):
    monkeypatch.setattr(workloads, "hidden", lambda seed: ((("tiny", seed + 5, LOAD),)))
    runs = grading._drive(Driving(), 40)
    assert [(r.kind, r.case) for r in runs] == [("tiny", "seed 45 (a tiny workload)")]


def test_a_drive_may_take_three_times_static_batching_s_steps_and_sixteen_more():
    assert grading.Figures(5, {}, 0, static_steps=10).max_steps == 46


def test_the_reference_s_figures_count_the_prompt_tokens_it_computed():
    figures = grading._figures(("test", "tiny"), LOAD)
    assert figures.prompt_tokens == {"a": 6, "b": 2} and figures.prompt_tokens_computed == 8
    # a chunk of 4 tokens a step: a's 6 prompt tokens take two steps, b waits for room
    assert figures.steps >= 3 and figures.static_steps >= figures.steps
    assert grading._figures(("test", "tiny"), copy.deepcopy(LOAD)) is figures  # kept by key


@pytest.mark.parametrize("static", [False, True], ids=["reference", "static"])
@pytest.mark.parametrize("breaks", ["raises", "stalls"])
def test_a_reference_that_does_not_finish_is_the_kata_s_bug(monkeypatch, static, breaks):
    from graders.batching.reference import ReferenceScheduler

    class Broken(ReferenceScheduler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.broken = kwargs.get("static", False) == static

        def schedule(self):
            if self.broken and breaks == "raises":
                raise ValueError("the kata's scheduler broke")
            return [] if self.broken else super().schedule()

    monkeypatch.setattr(grading, "ReferenceScheduler", Broken)
    with pytest.raises(RuntimeError, match="did not finish"):
        grading._figures(("broken", static, breaks), LOAD)
