"""`kata grade` from the outside: exit codes, the report, the JSON of the contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

JSON_KEYS = {"implementation", "level", "score", "max_score", "items", "tells", "hidden"}
ITEM_KEYS = {"id", "level", "status", "points", "max_points", "message"}
STATUSES = {"pass", "fail", "error", "timeout", "not_attempted"}


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("json") / "report.json"
    result = runner.invoke(app, ["grade", str(ROOT / "solutions/kv_cache.py"), "--json", str(out)])
    return result, json.loads(out.read_text())


def test_the_reference_grades_clean_with_exit_code_0(reference_run):
    result, _ = reference_run
    assert result.exit_code == 0, result.output
    assert "Level: L6" in result.output
    for heading in ("L4", "L5", "L6", "Down-level tells", "For the interviewer to mark"):
        assert heading in result.output


def test_json_follows_the_contract(reference_run):
    _, report = reference_run
    assert set(report) == JSON_KEYS
    assert report["level"] == "L6" and report["hidden"] is False
    assert report["score"] == report["max_score"] == 100.0
    for item in report["items"]:
        assert set(item) == ITEM_KEYS and item["status"] in STATUSES
        assert item["level"] in {"L4", "L5", "L6"}
    assert {t["id"] for t in report["tells"]} == {"caches-q", "recomputes-projections",
                                                  "shape-only-tests", "concat-every-step"}
    assert all(set(t) == {"id", "detected", "message"} for t in report["tells"])


def test_a_failing_implementation_exits_1(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text((ROOT / "starter/kv_cache.py").read_text())
    result = runner.invoke(app, ["grade", str(path)])
    assert result.exit_code == 1
    assert "Level: below L4" in result.output


@pytest.mark.parametrize("args, says", [
    (["grade", "no/such/file.py"], "does not exist"),
    (["grade", "solutions"], "is a directory"),
    (["grade", "README.md"], "is not a Python file"),
    (["grade", "solutions/kv_cache.py", "--tests", "nope.py"], "does not exist"),
    (["grade", "--no-such-option"], "No such option"),
], ids=["missing", "directory", "not-python", "missing-tests", "unknown-option"])
def test_usage_errors_exit_2_with_one_line(args, says, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert says in result.output


@pytest.mark.parametrize("command, shown", [
    ("grade", "[default: ./kv_cache.py"),
    ("bench", "[default: all;"),
], ids=["grade", "bench"])
def test_help_shows_bracketed_text_rather_than_eating_it_as_markup(command, shown):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert shown in result.output
