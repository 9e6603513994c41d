"""Hidden cases nobody has read: each hidden run draws its seed, the report records it, and
`--seed N` replays the run exactly."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli import app
from graders.judge.request import GradeRequest
from tests.grading import grade
from graders.shared import hidden_cases
from graders.shared.mutation import REFERENCE
from graders.workflows import batch
from tests.test_hidden import MUTANTS

runner = CliRunner()
HIDDEN_ONLY = next(
    case for case in MUTANTS if case.mutant.base == REFERENCE
)  # public cases pass it


def test_a_case_seed_is_the_run_seed_plus_the_case_offset():
    with hidden_cases.run_seed(1000):
        assert hidden_cases.seed(5) == 1005
        assert hidden_cases.seeds([1, 2]) == [1001, 1002]
        assert hidden_cases.seeded([(3, "a"), (4, "b")]) == [(1003, "a"), (1004, "b")]
    with pytest.raises(LookupError):
        hidden_cases.seed(5)  # outside a hidden run there are no hidden cases


def test_a_fresh_seed_is_drawn_from_the_os_each_time(monkeypatch):
    monkeypatch.undo()  # the suite's fixed seed (tests/conftest.py) is patched on graders.judge.grade
    from graders.judge import grade as judge

    drawn = {judge.secrets.randbelow(10**7) for _ in range(5)}
    assert len(drawn) > 1, "the OS gives different seeds"


@pytest.mark.slow
def test_the_same_seed_replays_the_same_verdicts_and_another_seed_other_cases(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text(HIDDEN_ONLY.mutant.source())
    runs = [grade(path, hidden=True, only=set(HIDDEN_ONLY.items), seed=seed) for seed in (5, 5, 6)]
    assert [r.seed for r in runs] == [5, 5, 6]
    assert all(i.status != "pass" for r in runs for i in r.items)
    messages = [[i.message for i in r.items] for r in runs]
    assert messages[0] == messages[1], "the same seed, the same cases and verdicts"
    assert messages[0] != messages[2], "another seed, other cases"


def test_the_seed_is_in_the_json_and_the_report(tmp_path):
    out = tmp_path / "r.json"
    result = runner.invoke(
        app,
        [
            "grade",
            str(REFERENCE),
            "--hidden",
            "--seed",
            "424242",
            "--item",
            "attend-shape",
            "--json",
            str(out),
            "--sandbox",
            "process",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["seed"] == 424242
    assert "--seed 424242" in result.output
    public = runner.invoke(
        app, ["grade", str(REFERENCE), "--item", "attend-shape", "--json", str(out)]
    )
    assert public.exit_code == 0 and json.loads(out.read_text())["seed"] is None


def test_seed_without_hidden_is_a_usage_error():
    result = runner.invoke(app, ["grade", str(REFERENCE), "--seed", "3"])
    assert result.exit_code == 2 and "use it with --hidden" in result.output


@pytest.mark.slow
def test_grade_all_gives_every_submission_the_same_seed_and_says_which(tmp_path):
    for name in ("alice", "bob"):
        (tmp_path / "in" / name).mkdir(parents=True)
        (tmp_path / "in" / name / "kv_cache.py").write_text(REFERENCE.read_text())
    outcomes = batch.grade_all(
        batch.find_submissions(tmp_path / "in"),
        2,
        GradeRequest(tmp_path / "in", hidden=True, seed=77),
    )
    assert [o.result.seed for o in outcomes] == [77, 77]
    batch.write_summary(outcomes, tmp_path / "s.csv", tmp_path / "s.md")
    assert (tmp_path / "s.md").read_text().startswith("Hidden cases of seed 77")
    assert ",77," in (tmp_path / "s.csv").read_text()
