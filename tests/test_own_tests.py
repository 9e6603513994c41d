"""`own-tests` judges the candidate's tests by what they catch, and `shape-only-tests` shows
when they catch nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.dense.items import own_tests as item
from graders.dense.mistakes import MISTAKES, SHAPE_MISTAKES
from tests.grading import grade
from graders.judge.workers import Worker
from graders.shared import hidden_cases

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "kv_cache.py"
OWN = Path(__file__).parent / "own_tests"


def own_tests(tests: Path | None):
    result = grade(REFERENCE, tests, only={"own-tests"})
    (item,) = result.items
    return item, {t.id: t for t in result.tells}


def test_the_model_tests_catch_every_bundled_mistake():
    item, tells = own_tests(ROOT / "solutions" / "test_kv_cache.py")
    assert item.status == "pass", item.message
    assert f"catch all {len(MISTAKES)} bundled mistakes" in item.message
    assert not tells["shape-only-tests"].detected


def test_shape_only_tests_fail_and_show_the_tell():
    item, tells = own_tests(OWN / "shape_only.py")
    assert item.status == "fail"
    assert item.message.endswith(f"; caught {', '.join(sorted(SHAPE_MISTAKES))}"), item.message
    assert tells["shape-only-tests"].detected
    result = grade(REFERENCE, OWN / "shape_only.py")
    assert result.level == "L4", "the tell caps the level at L4"


def test_tests_that_miss_some_mistakes_name_what_they_missed():
    item, tells = own_tests(OWN / "last_step_only.py")
    assert item.status == "fail" and "missed" in item.message
    assert "attention runs over every allocated slot" in item.message, item.message
    assert not tells["shape-only-tests"].detected, "they catch some, so they are not shape-only"


def test_tests_that_fail_on_the_reference_cannot_judge_anything():
    item, _ = own_tests(OWN / "wrong_reference.py")
    assert item.status == "fail" and "fail on the reference solution" in item.message


@pytest.mark.parametrize(
    "source, shows",
    [
        ("def test_uses_a_fixture_that_is_nowhere(kv):\n    assert kv\n", "fixture 'kv' not found"),
        ("import kv_helpers\n\n\ndef test_x():\n    pass\n", "No module named 'kv_helpers'"),
    ],
    ids=["missing-fixture", "does-not-import"],
)
def test_tests_that_error_before_they_run_are_not_said_to_be_missing(tmp_path, source, shows):
    """A test whose fixture is nowhere, or a test file that does not import, is an error of
    pytest's: the message shows it, not "collects no tests"."""
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text(source)
    item, _ = own_tests(tests)
    assert item.status == "fail" and "fail on the reference solution" in item.message, item.message
    assert shows in item.message and "collects no tests" not in item.message


def test_a_test_file_that_exits_is_a_failure_with_a_reason():
    item, _ = own_tests(OWN / "exits.py")
    assert item.status == "fail" and "crashed" in item.message
    assert "exited with code 3" in item.message


@pytest.mark.parametrize(
    "tests", [None, ROOT / "starter" / "test_kv_cache.py"], ids=["none", "starter"]
)
def test_no_tests_or_the_untouched_starter_tests_are_not_attempted(tests):
    item, _ = own_tests(tests)
    assert item.status == "not_attempted"


def test_a_test_file_that_forges_its_runs_reply_is_an_error_not_a_verdict():
    """A frame the tests wrote themselves is checked as any reply is (graders.judge.replies): a
    malformed reply fails own-tests as the candidate's error (exit 1), never as a grader bug."""
    item, _ = own_tests(OWN / "forges_its_reply.py")
    assert item.status == "error", item.message
    assert "malformed" in item.message


@pytest.fixture
def test_runs(monkeypatch) -> list[int]:
    """The batches the tests worker is sent from now on: how many runs each."""
    batches, run = [], Worker.run

    def counted(worker, requests, *args, **kwargs):
        if worker.mode == "tests":
            batches.append(len(requests))
        return run(worker, requests, *args, **kwargs)

    monkeypatch.setattr(Worker, "run", counted)
    return batches


def test_a_test_file_judged_again_unchanged_is_not_run_again(tmp_path, test_runs):
    """What a test file's runs gave is kept for the next grade that meets the same bytes (a
    watch's grade after a save of kv_cache.py alone); once the file changes, its tests run
    again and the verdict follows the file as it is now."""
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text((ROOT / "solutions" / "test_kv_cache.py").read_text())
    first, _ = own_tests(tests)
    again, _ = own_tests(tests)
    assert first.status == again.status == "pass", again.message
    assert again.message == first.message
    assert test_runs == [len(MISTAKES) + 2], "the second grade ran the tests again"
    tests.write_text((OWN / "shape_only.py").read_text())
    changed, tells = own_tests(tests)
    assert test_runs == [len(MISTAKES) + 2] * 2
    assert changed.status == "fail" and tells["shape-only-tests"].detected


def test_runs_that_did_not_end_are_run_again(test_runs):
    for _ in range(2):
        item, _ = own_tests(OWN / "exits.py")
        assert item.status == "fail" and "exited with code 3" in item.message
    assert test_runs == [len(MISTAKES) + 2] * 2


def test_the_runs_name_no_implementation_and_follow_the_grades_seed():
    """What the tests worker is sent says nothing of which implementation it is but its code:
    the reference's file name is its own (no secret), every other run's is drawn from the
    seed; a public grade uses PUBLIC_SEED, a hidden one its run's seed."""
    public = item.implementations(item.PUBLIC_SEED)
    assert [set(run) for run in public] == [{"source", "file"}] * (len(MISTAKES) + 2)
    files = [run["file"] for run in public]
    assert files[0] == item.REFERENCE_FILE and len(set(files)) == len(files)
    assert not any(m.name in run["file"] for m in MISTAKES for run in public)
    assert item.implementations(item.PUBLIC_SEED) == public
    assert item._seed() == item.PUBLIC_SEED
    with hidden_cases.run_seed(123):
        assert item._seed() == 123 + item.SEED_OFFSET
    hidden = item.implementations(123 + item.SEED_OFFSET)
    assert hidden[0] == public[0] and all(h != p for h, p in zip(hidden[1:], public[1:]))


@pytest.mark.slow
def test_a_test_file_that_fails_the_disguise_fails_own_tests(tmp_path):
    """Tests that pass on the reference alone (here: by its docstring) fail a correct
    implementation, and own-tests says so."""
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text(
        "import kv_cache\n\n\ndef test_documented():\n    assert kv_cache.attend.__doc__\n"
    )
    result, _ = own_tests(tests)
    assert result.status == "fail"
    assert result.message.startswith("your tests fail a correct implementation"), result.message
