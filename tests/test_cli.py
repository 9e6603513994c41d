"""`kata grade` from the outside: exit codes, the report, the JSON of the contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graders.judge.grade as judge
from benchmarks import bench
from cli import app
from graders.judge.isolation import GIB, Sandbox, SandboxUnavailable
from graders.judge.request import DEFAULT_IMPORT_TIMEOUT
from graders.shared import bundled, transformers_extra
from tests.grading import grade, stand_in

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

JSON_KEYS = {
    "implementation",
    "level",
    "score",
    "max_score",
    "plus_score",
    "plus_max_score",
    "items",
    "tells",
    "hidden",
    "isolation",
    "partial",
    "seed",
    "similarity",
}
ITEM_KEYS = {"id", "level", "status", "points", "max_points", "message", "cause"}
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
    for heading in ("L4", "L5", "L6", "Down-level tells: none detected"):
        assert heading in result.output
    assert "For the interviewer to mark" not in result.output, "the checklist is for --hidden"


def test_json_follows_the_contract(reference_run):
    _, report = reference_run
    assert set(report) == JSON_KEYS
    # the reference implements section 8: L6+, its points beside the 100 (real-model's where
    # transformers is here: else that item is not attempted, and the level stays L6)
    model = transformers_extra.problem() is None
    assert (
        report["level"] == ("L6+" if model else "L6")
        and report["hidden"] is False
        and report["partial"] is False
    )
    assert report["plus_max_score"] == 40 and report["plus_score"] == (40 if model else 30)
    assert report["isolation"] in {"bwrap", "process"}
    assert report["score"] == report["max_score"] == 100.0
    for item in report["items"]:
        assert set(item) == ITEM_KEYS and item["status"] in STATUSES
        assert item["level"] in {"L4", "L5", "L6", "L6+"}
    assert {t["id"] for t in report["tells"]} == {
        "caches-q",
        "recomputes-projections",
        "shape-only-tests",
        "concat-every-step",
    }
    assert all(set(t) == {"id", "detected", "message"} for t in report["tells"])


def test_a_partial_run_says_what_passed_and_reports_no_level(tmp_path):
    out = tmp_path / "report.json"
    result = runner.invoke(
        app,
        [
            "grade",
            str(ROOT / "solutions/kv_cache.py"),
            "--item",
            "attend-shape",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Partial run: item attend-shape passes" in result.output
    assert "Level:" not in result.output, "a partial run has no level"
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["level"] is None


def test_a_failing_implementation_exits_1(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text((ROOT / "starter/kv_cache.py").read_text())
    result = runner.invoke(app, ["grade", str(path)])
    assert result.exit_code == 1
    assert "Level: below L4" in result.output


@pytest.mark.parametrize(
    "args, says",
    [
        (["grade", "no/such/file.py"], "does not exist"),
        (["grade", "solutions"], "is a directory"),
        (["grade", "README.md"], "is not a Python file"),
        (["grade", "solutions/kv_cache.py", "--tests", "nope.py"], "does not exist"),
        (["grade", "--no-such-option"], "No such option"),
    ],
    ids=["missing", "directory", "not-python", "missing-tests", "unknown-option"],
)
def test_usage_errors_exit_2_with_one_line(args, says, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert says in result.output


@pytest.mark.parametrize(
    "command, shown",
    [
        ("grade", "[default: ./kv_cache.py"),
        ("bench", "[default: all;"),
    ],
    ids=["grade", "bench"],
)
def test_help_shows_bracketed_text_rather_than_eating_it_as_markup(command, shown):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert shown in result.output


# --- the report at 80 and 120 columns: default, -v, -q -----------------------------------------


@pytest.fixture(scope="module")
def graded() -> dict[str, judge.GradeResult]:
    """The concat solution and the reference, graded once each with the model tests."""
    tests = ROOT / "solutions" / "test_kv_cache.py"
    return {
        name: grade(ROOT / "solutions" / name, tests)
        for name in ("concat_kv_cache.py", "kv_cache.py")
    }


# Lines of `kata grade solutions/NAME --tests solutions/test_kv_cache.py` at most, by columns.
LINES = {
    ("concat_kv_cache.py", 80): {"default": 45, "quiet": 5},
    ("concat_kv_cache.py", 120): {"default": 40, "quiet": 4},
    ("kv_cache.py", 80): {"default": 28, "quiet": 1},
    ("kv_cache.py", 120): {"default": 27, "quiet": 1},
}


@pytest.mark.slow
@pytest.mark.parametrize("name, columns", list(LINES), ids=[f"{n}-{c}" for n, c in LINES])
def test_the_report_fits_a_screen_and_closes_with_what_does_not_pass(
    name, columns, graded, monkeypatch, tmp_path
):
    for file in (name, "test_kv_cache.py"):  # graded here, so that the record stays here
        (tmp_path / "solutions").mkdir(exist_ok=True)
        (tmp_path / "solutions" / file).write_bytes((ROOT / "solutions" / file).read_bytes())
    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch, lambda request, on_item: graded[name])
    args = ["grade", f"solutions/{name}", "--tests", "solutions/test_kv_cache.py"]
    shown = {
        flag: runner.invoke(app, [*args, *flags], env={"COLUMNS": str(columns)}).output
        for flag, flags in (("default", []), ("verbose", ["-v"]), ("quiet", ["-q"]))
    }
    lines = {flag: len(text.splitlines()) for flag, text in shown.items()}
    assert lines["default"] <= LINES[name, columns]["default"], shown["default"]
    assert lines["quiet"] <= LINES[name, columns]["quiet"], shown["quiet"]
    assert lines["verbose"] > 2 * lines["default"], "-v explains every item"
    # -q prints the closing block alone, naming every item that does not pass (the default
    # report's names their causes, given above it)
    closing = [line for line in shown["quiet"].splitlines() if not line.startswith("Not passing")]
    default = [line for line in shown["default"].splitlines() if not line.startswith("Not passing")]
    assert default[-len(closing) :] == closing
    # the items listed one by one: L6+ not started is the group's one line (GradeResult.reported)
    failing = [i for i in graded[name].reported if i.status != "pass"]
    unwrapped = " ".join(shown["default"].split())
    for item in failing:
        assert " ".join(item.message.split()) in unwrapped, f"{item.id}'s message, whole"
    if failing:
        assert f"Not passing: {', '.join(i.id for i in failing)}" in " ".join(
            shown["quiet"].split()
        )
        assert f"Next: kata hint {failing[0].id}" in shown["quiet"]


# --- options passed through to the judge and the bench -----------------------------------------


@pytest.fixture
def seen(monkeypatch) -> dict:
    """Stand-ins for graders.judge.grade.grade (as `kata grade` and batch.grade_all call it) and for
    benchmarks.bench.run: each records its keyword arguments, then stops the command. No worker
    starts, and bubblewrap counts as there (grade-all checks its sandbox first): the stand-ins
    are reached with or without it."""
    recorded = {}
    monkeypatch.setattr("graders.judge.isolation.bwrap_problem", lambda: None)

    def grade(request, on_item):
        recorded.update(sandbox=request.sandbox, import_timeout=request.import_timeout)
        raise SandboxUnavailable("--sandbox require: bubblewrap cannot run here")

    def run(settings, on_event):
        recorded.update(sandbox=settings.sandbox)
        raise SandboxUnavailable("--sandbox require: bubblewrap cannot run here")

    stand_in(monkeypatch, grade)
    monkeypatch.setattr(bench, "run", run)
    return recorded


COMMANDS = {
    "grade": ["grade", "solutions/kv_cache.py"],
    "grade-all": ["grade-all", "solutions", "--out", "{tmp}"],
    "bench": [
        "bench",
        "--lengths",
        "16",
        "--dtypes",
        "float32",
        "--shapes",
        "mha",
        "--subjects",
        "bare",
    ],
}


@pytest.mark.parametrize("command", list(COMMANDS), ids=list(COMMANDS))
def test_sandbox_and_memory_reach_the_judge_and_an_unmet_sandbox_exits_2(
    command, seen, monkeypatch, tmp_path
):
    monkeypatch.chdir(ROOT)
    args = [arg.format(tmp=tmp_path) for arg in COMMANDS[command]]
    result = runner.invoke(app, [*args, "--sandbox", "require", "--memory", "2.5"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "kata: error: --sandbox require: bubblewrap cannot run here"
    assert seen["sandbox"] == Sandbox(mode="require", memory=int(2.5 * GIB))


@pytest.mark.parametrize("command", ["grade", "grade-all"])
def test_import_timeout_reaches_the_judge(command, seen, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    args = [arg.format(tmp=tmp_path) for arg in COMMANDS[command]]
    runner.invoke(app, [*args, "--import-timeout", "7.5"])
    assert seen["import_timeout"] == 7.5


@pytest.mark.parametrize("command", list(COMMANDS), ids=list(COMMANDS))
def test_the_defaults_are_the_judges(command, seen, monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    runner.invoke(app, [arg.format(tmp=tmp_path) for arg in COMMANDS[command]])
    defaults = {
        "grade": Sandbox(),
        "grade-all": Sandbox("require"),  # grade-all: strangers' files
        "bench": bench.Settings([], [], [], []).sandbox,
    }
    assert seen["sandbox"] == defaults[command]
    if command != "bench":
        assert seen["import_timeout"] == DEFAULT_IMPORT_TIMEOUT


def test_an_unknown_sandbox_mode_is_a_usage_error():
    result = runner.invoke(app, ["grade", "solutions/kv_cache.py", "--sandbox", "docker"])
    assert result.exit_code == 2 and "docker" in result.output


# --- the kata's own files ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["rubric"], ["init", "ws"], ["solution", "concat"]],
    ids=["rubric", "init", "solution"],
)
def test_a_missing_kata_file_exits_4_with_one_line(command, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bundled, "RUBRIC", tmp_path / "gone" / "rubric.toml")
    result = runner.invoke(app, command)
    assert result.exit_code == 4
    assert result.output.splitlines() == [
        f"kata: the kata's file {tmp_path / 'gone' / 'rubric.toml'} is missing from this "
        "installation (reinstall kvkata)"
    ]
    assert list(tmp_path.iterdir()) == [], "nothing was made"


@pytest.mark.parametrize(
    "name, path",
    [
        ("concat", "solutions/concat_kv_cache.py"),
        ("tiled", "benchmarks/tiled_attention.py"),
        ("fused", "benchmarks/fused_attention.py"),
        ("tiled-paged", "benchmarks/tiled_paged_attention.py"),
        ("fused-paged", "benchmarks/fused_paged_attention.py"),
    ],
)
def test_solution_prints_the_exact_source_when_not_a_terminal(name, path):
    result = runner.invoke(app, ["solution", name])
    assert result.exit_code == 0
    assert result.stdout_bytes == (ROOT / path).read_bytes()


class _Exited(Exception):
    pass


@pytest.mark.parametrize(
    "argv, code", [(["rubric"], 0), (["grade", "missing.py"], 2)], ids=["done", "usage-error"]
)
def test_the_command_leaves_with_the_apps_exit_code_its_output_flushed(
    argv, code, monkeypatch, tmp_path, capfd
):
    """`kata` (cli.main) ends with os._exit, skipping the interpreter's teardown: the exit code
    must be the app's, and everything it printed must be out first."""
    import cli

    def exit_now(status):
        raise _Exited(status)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.argv", ["kata", *argv])
    monkeypatch.setattr(cli.os, "_exit", exit_now)
    with pytest.raises(_Exited) as exited:
        cli.main()
    assert exited.value.args == (code,)
    out, err = capfd.readouterr()
    assert (out + err).strip(), "nothing printed before the exit"


def test_a_grade_starts_its_workers_before_it_imports_torch(tmp_path):
    """The workers' torch imports overlap the judge's only if the judge has not imported torch
    when it starts them (graders.judge.workers keeps torch out of its imports for this)."""
    (tmp_path / "kv_cache.py").write_text((ROOT / "solutions" / "kv_cache.py").read_text())
    probe = (
        "import sys\n"
        "from graders.judge.workers import GradeWorkers\n"
        "start = GradeWorkers.start.__func__\n"
        "seen = []\n"
        "def starting(cls, request, ahead=False):\n"
        "    seen.append(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
        "    return start(cls, request, ahead)\n"
        "GradeWorkers.start = classmethod(starting)\n"
        "from cli import app\n"
        "try:\n"
        "    app(['grade', 'kv_cache.py', '--item', 'append-time-dim'])\n"
        "except SystemExit as end:\n"
        "    print(end.code, seen)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.stdout.splitlines()[-1] == "0 [[]]", done.stdout + done.stderr
