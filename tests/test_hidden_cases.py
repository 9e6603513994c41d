"""graders.shared.hidden_cases: a hidden case's seed is the run's seed plus its offset, and every verdict
raised inside `labelled` (or `run`) names the case once, keeping its kind: a failure stays a
failure, a timeout a timeout, a crash a crash. A failure that already names its case is never
swallowed (were it, wrong code would pass the hidden cases of every item that labels them)."""

from __future__ import annotations

import pytest

from graders.shared import hidden_cases
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted, Plan, Results

CASE = hidden_cases.name(1234, "B=2, a prompt then chunks")


class Raising:
    """A candidate whose run raises `exc` (or, with None, returns `results`)."""

    def __init__(self, exc: Exception | None = None, results: Results | None = None):
        self.exc, self.results, self.plans = exc, results, []

    def run(self, plan: Plan) -> Results:
        self.plans.append(plan)
        if self.exc is not None:
            raise self.exc
        return self.results


def test_a_case_seed_is_the_runs_seed_plus_its_offset_and_only_inside_a_run():
    with pytest.raises(LookupError):
        hidden_cases.seed(3)
    with hidden_cases.run_seed(1000):
        assert hidden_cases.seed(3) == 1003
        assert hidden_cases.seeds([0, 5, 7]) == [1000, 1005, 1007]
        assert hidden_cases.seeded([(1, "a", 2), (4, "b", 3)]) == [(1001, "a", 2), (1004, "b", 3)]
        with hidden_cases.run_seed(50):
            assert hidden_cases.seed(0) == 50
        assert hidden_cases.seed(0) == 1000, "the outer run's seed is restored"
    with pytest.raises(LookupError):
        hidden_cases.seed(0)


def test_a_run_seed_is_restored_when_the_run_fails():
    with pytest.raises(Fail):
        with hidden_cases.run_seed(7):
            raise Fail("x")
    with pytest.raises(LookupError):
        hidden_cases.seed(0)


def test_names_shapes_and_layouts_in_words():
    assert CASE == "seed 1234 (B=2, a prompt then chunks)"
    assert hidden_cases.shape(2, 1, 8, heads="kv head") == "B=2, 1 kv head, head_dim 8"
    assert hidden_cases.shape(3, 4) == "B=3, 4 heads"
    assert hidden_cases.shape(1, 0) == "B=1, 0 heads"
    assert [hidden_cases.layout(*heads) for heads in ((4, 4), (4, 1), (8, 2), (1, 1))] == [
        "MHA",
        "MQA",
        "GQA 8/2",
        "MHA",
    ]


def test_a_failure_that_names_its_case_fails_unchanged():
    original = Fail(f"{CASE}: first differs at append 3, row 0, head 1")
    with pytest.raises(Fail) as failure:
        with hidden_cases.labelled(CASE):
            raise original
    assert failure.value is original
    assert str(failure.value).count(CASE) == 1


def test_a_failure_that_does_not_name_its_case_fails_with_the_case_in_front():
    with pytest.raises(Fail) as failure:
        with hidden_cases.labelled(CASE):
            raise Fail("attend's output has shape [2, 4, 1], expected [2, 4, 1, 8]")
    message = str(failure.value)
    assert message.startswith(f"{CASE}: ") and message.count(CASE) == 1
    assert message.endswith("expected [2, 4, 1, 8]")
    assert failure.value.__suppress_context__


@pytest.mark.parametrize("kind", [CandidateTimeout, CandidateError], ids=lambda k: k.__name__)
def test_a_timeout_or_a_crash_keeps_its_kind_and_gets_the_case_in_front(kind):
    with pytest.raises(kind) as raised:
        with hidden_cases.labelled(CASE):
            raise kind("the implementation did not answer within 10 s")
    assert type(raised.value) is kind
    message = str(raised.value)
    assert message.startswith(f"{CASE}: ") and message.endswith("within 10 s")


@pytest.mark.parametrize(
    "exc", [NotAttempted("attend"), KeyError("the judge's own bug")], ids=lambda e: type(e).__name__
)
def test_anything_else_passes_through_untouched(exc):
    with pytest.raises(type(exc)) as raised:
        with hidden_cases.labelled(CASE):
            raise exc
    assert raised.value is exc


def test_a_case_that_raises_nothing_goes_on():
    with hidden_cases.labelled(CASE):
        value = 42
    assert value == 42


def test_run_returns_the_candidates_results_and_labels_what_its_run_raises():
    results, plan = Results(), Plan()
    candidate = Raising(results=results)
    assert hidden_cases.run(candidate, plan, CASE) is results
    assert candidate.plans == [plan]
    with pytest.raises(CandidateTimeout, match=r"^seed 1234 \(B=2, a prompt then chunks\): "):
        hidden_cases.run(Raising(CandidateTimeout("the implementation hung")), plan, CASE)
    with pytest.raises(CandidateError, match=r"^seed 1234 .*: the process .* was killed$"):
        hidden_cases.run(Raising(CandidateError("the process running it was killed")), plan, CASE)
