"""The candidate's, interviewer's and learner's commands, end to end through the CLI."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import graders.judge.grade as judge
from cli import app
from graders.judge.isolation import bwrap_problem
from graders.shared.mutation import Mutant
from graders.shared.rubric import load
from graders.shared.tracks import SERVING
from graders.workflows import batch
from tests.grading import stand_in

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "kv_cache.py"
PRIVATE = ROOT / "docs" / "examples" / "private_graders"
runner = CliRunner()

FIXED_MASK_BUFFER = Mutant(
    "mask-buffer-of-1024",
    "attend takes positions from a 1024-slot buffer built once",
    replace=(
        ("torch.arange(keys.shape[2], device=keys.device) >=", "POSITIONS[: keys.shape[2]] >="),
        (
            "import math\n",
            "import math\n\nimport torch as _torch\n\nPOSITIONS = _torch.arange(1024)\n",
        ),
    ),
)


def report(args: list[str], tmp_path: Path) -> tuple[int, dict]:
    out = tmp_path / "report.json"
    result = runner.invoke(app, [*args, "--json", str(out)])
    return result.exit_code, json.loads(out.read_text())


def test_a_candidate_goes_from_init_to_a_graded_workspace(tmp_path, monkeypatch):
    workspace = tmp_path / "ws"
    result = runner.invoke(app, ["init", str(workspace)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in workspace.iterdir()) == [
        ".gitignore",
        "README.md",
        "kv_cache.py",
        "paged_kv_cache.py",
        "scheduler.py",
        "test_kv_cache.py",
    ]
    monkeypatch.chdir(workspace)
    code, data = report(["grade", "--item", "append-time-dim", "--item", "own-tests"], tmp_path)
    assert code == 1
    assert Path(data["implementation"]) == workspace / "kv_cache.py"
    assert {i["id"]: i["status"] for i in data["items"]} == {
        "append-time-dim": "not_attempted",
        "own-tests": "not_attempted",
    }
    assert runner.invoke(app, ["init", str(workspace)]).exit_code == 2, "init never overwrites work"


def test_level_and_item_select_what_is_graded(tmp_path):
    code, data = report(["grade", str(REFERENCE), "--level", "L4"], tmp_path)
    assert code == 0 and [i["id"] for i in data["items"]] == ["append-time-dim", "attend-shape"]
    assert data["level"] is None and data["partial"] is True, "a partial run reaches no level"


def test_exitfirst_stops_at_the_first_item_that_does_not_pass(tmp_path):
    code, data = report(["grade", str(ROOT / "starter" / "kv_cache.py"), "-x"], tmp_path)
    assert code == 1 and len(data["items"]) == 1


@pytest.mark.parametrize(
    "args, says",
    [
        (["grade", str(REFERENCE), "--item", "no-such-item"], "no rubric item"),
        (["grade", str(REFERENCE), "--level", "L9"], "no level"),
        (["grade", str(REFERENCE), "--graders", str(PRIVATE)], "use it with --hidden"),
        (["grade", str(REFERENCE), "--format", "xml"], "choose 'kata' or 'gradescope'"),
        (["hint", "no-such-item"], "valid ids"),
        (["solution", "nope"], "choose one of"),
        (["grade-all", "no/such/dir"], "is not a folder"),
        (["grade", str(REFERENCE), "--level", "L5", "--item", "gqa"], "choose no item"),
    ],
    ids=[
        "item",
        "level",
        "graders-without-hidden",
        "format",
        "hint",
        "solution",
        "grade-all",
        "selects-nothing",
    ],
)
def test_bad_input_exits_2_with_one_line(args, says):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert says in result.output


def test_hints_come_one_step_at_a_time():
    first = runner.invoke(app, ["hint", "ragged-batch"])
    last = runner.invoke(app, ["hint", "ragged-batch", "--step", "9"])
    hints = load().item("ragged-batch").hints
    assert first.exit_code == 0 and "hint 1 of 3" in first.output and "--step 2" in first.output
    assert f"hint {len(hints)} of {len(hints)}" in last.output and "--step" not in last.output


def test_a_failed_item_names_its_hint_command(tmp_path):
    result = runner.invoke(
        app, ["grade", str(ROOT / "starter" / "kv_cache.py"), "--item", "attend-shape"]
    )
    assert "kata hint attend-shape" in result.output


def test_rubric_and_solutions_print():
    rubric = runner.invoke(app, ["rubric"])
    assert rubric.exit_code == 0
    assert all(item.id in rubric.output for item in load().items)
    concat = runner.invoke(app, ["solution", "concat"])
    assert concat.exit_code == 0 and "torch.cat" in concat.output


def test_private_graders_run_as_hidden_cases(tmp_path):
    args = [
        "--item",
        "prefix-equivalence",
        "--hidden",
        "--graders",
        str(PRIVATE),
        "--sandbox",
        "process",
    ]
    code, data = report(["grade", str(REFERENCE), *args], tmp_path)
    assert code == 0 and data["hidden"] is True
    mutant = tmp_path / "kv_cache.py"
    mutant.write_text(FIXED_MASK_BUFFER.source())
    public_code, _ = report(["grade", str(mutant), "--item", "prefix-equivalence"], tmp_path)
    assert public_code == 0, "the public cases never reach 1024 positions"
    code, data = report(["grade", str(mutant), *args], tmp_path)
    (item,) = data["items"]
    assert code == 1 and item["status"] != "pass" and item["message"].startswith("hidden case")


def test_interviewer_formats_are_written(tmp_path):
    md, xml, gs = tmp_path / "card.md", tmp_path / "junit.xml", tmp_path / "results.json"
    result = runner.invoke(
        app,
        [
            "grade",
            str(REFERENCE),
            "--level",
            "L4",
            "--markdown",
            str(md),
            "--junit",
            str(xml),
            "--format",
            "gradescope",
            "--json",
            str(gs),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "append-time-dim" in md.read_text()
    assert ET.parse(xml).getroot().tag == "testsuites"
    assert json.loads(gs.read_text())["score"] == 10


def test_watch_regrades_with_a_short_summary(monkeypatch):
    def run_twice(paths, run, **kwargs):
        assert REFERENCE in paths
        run()
        run()
        return 2

    monkeypatch.setattr("graders.workflows.watch.watch", run_twice)
    result = runner.invoke(app, ["grade", str(REFERENCE), "--level", "L4", "--watch"])
    assert result.exit_code == 0, result.output
    assert result.output.count("Partial run: items append-time-dim, attend-shape pass") == 2
    assert "watching" in result.output
    assert "For the interviewer" not in result.output, "watch prints a summary, not the report"


@pytest.mark.slow
def test_watch_grades_each_save_with_workers_started_after_the_last_report(monkeypatch):
    """Each run but the first takes the workers started once the report before it was out;
    the ones started after the last run are closed when the watch ends."""
    from graders.judge.isolation import _children
    from graders.judge.workers import GradeWorkers

    monkeypatch.setattr("graders.judge.workers._SPAWNER", None)  # as `kata grade` starts them

    started, went = [], []
    start, go = GradeWorkers.start.__func__, GradeWorkers.go

    def start_and_count(cls, *args, ahead=False, **kwargs):
        started.append(ahead)
        return start(cls, *args, ahead=ahead, **kwargs)

    monkeypatch.setattr(GradeWorkers, "start", classmethod(start_and_count))
    monkeypatch.setattr(GradeWorkers, "go", lambda self: (went.append(self), go(self)))

    def run_three_times(paths, run, **kwargs):
        for _ in range(3):
            run()
        return 3

    monkeypatch.setattr("graders.workflows.watch.watch", run_three_times)
    before = set(_children(os.getpid()))
    result = runner.invoke(app, ["grade", str(REFERENCE), "--level", "L4", "--watch"])
    assert result.exit_code == 0, result.output
    assert result.output.count("Partial run: items append-time-dim, attend-shape pass") == 3
    assert started == [False, True, True, True] and len(went) == 2
    assert not set(_children(os.getpid())) - before, "workers outlived the watch"


@pytest.mark.slow
@pytest.mark.skipif(
    bwrap_problem() is not None,  # the staged copies are bubblewrap's
    reason=f"bubblewrap cannot run here: {bwrap_problem()}",
)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_watch_killed_or_left_by_its_terminal_leaves_nothing(tmp_path, signum):
    """`kill` or a closed terminal ends `kata grade --watch` (once the grade under way, here the
    start of the next grade's workers, is over): the workers it started ahead and their staged
    copies of the candidate's files are gone."""
    (tmp_path / "tmp").mkdir()
    shutil.copy(REFERENCE, tmp_path / "kv_cache.py")
    log = tmp_path / "watch.log"
    watching = subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "grade", "kv_cache.py", "--level", "L4", "--watch"],
        cwd=tmp_path,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env=dict(os.environ, TMPDIR=str(tmp_path / "tmp")),
    )
    try:
        deadline = time.monotonic() + 120
        while "isolation:" not in log.read_text() or not list(
            (tmp_path / "tmp").glob("kata-staged-*")
        ):
            assert watching.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        watching.send_signal(signum)
        assert watching.wait(timeout=30) == 0, log.read_text()
    finally:
        if watching.poll() is None:
            os.killpg(watching.pid, signal.SIGKILL)
    assert not list((tmp_path / "tmp").iterdir()), "the watch left files in its temp folder"
    leftover = subprocess.run(["pgrep", "-s", str(watching.pid)], capture_output=True, text=True)
    assert not leftover.stdout.strip(), f"processes of the watch outlived it: {leftover.stdout}"


@pytest.mark.slow  # whole grades
def test_grade_all_grades_every_submission(tmp_path):
    for name in ("alice", "bob"):
        (tmp_path / "in" / name).mkdir(parents=True)
    shutil.copy(REFERENCE, tmp_path / "in" / "alice" / "kv_cache.py")
    (tmp_path / "in" / "bob" / "kv_cache.py").write_text("def attend(:\n")
    result = runner.invoke(
        app,
        [
            "grade-all",
            str(tmp_path / "in"),
            "--out",
            str(tmp_path / "out"),
            "--jobs",
            "2",
            "--sandbox",
            "process",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "alice" in summary and "bob" in summary
    assert (tmp_path / "out" / "summary.csv").is_file()


@pytest.mark.slow  # whole grades
def test_grade_all_grades_a_batch_of_paged_caches_with_the_serving_items_alone(tmp_path):
    for name in ("alice", "bob"):
        (tmp_path / "in" / name).mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / "paged_kv_cache.py", tmp_path / "in" / "alice")
    shutil.copy(ROOT / "starter" / "paged_kv_cache.py", tmp_path / "in" / "bob")
    shutil.copy(REFERENCE, tmp_path / "in" / "bob" / "kv_cache.py")  # not the serving track's
    result = runner.invoke(
        app,
        [
            "grade-all",
            str(tmp_path / "in"),
            "--track",
            "serving",
            "--out",
            str(tmp_path / "out"),
            "--sandbox",
            "process",
        ],
    )
    assert result.exit_code == 0, result.output
    with (tmp_path / "out" / "summary.csv").open(newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    serving = [i.id for i in load().track(SERVING)]
    assert list(rows["alice"]) == [
        "submission",
        "level",
        "score",
        "max_score",
        *serving,
        "tells",
        "similarity",
        "seed",
        "error",
    ]
    assert rows["alice"]["level"] == "serving" and {rows["alice"][i] for i in serving} == {"pass"}
    assert rows["bob"]["level"] == "none" and {rows["bob"][i] for i in serving} == {"not_attempted"}
    empty = runner.invoke(app, ["grade-all", str(tmp_path / "out"), "--track", "serving"])
    assert empty.exit_code == 2 and "holds a paged_kv_cache.py" in empty.output


def test_the_serving_track_is_graded_as_its_own_track(tmp_path):
    code, data = report(
        ["grade", str(ROOT / "solutions" / "paged_kv_cache.py"), "--track", "serving"], tmp_path
    )
    assert code == 0 and data["level"] == "serving" and data["tells"] == []
    assert {i["level"] for i in data["items"]} == {"serving"}
    assert data["score"] == data["max_score"] == 100
    code, data = report(
        ["grade", "--track", "serving", str(ROOT / "starter" / "paged_kv_cache.py")], tmp_path
    )
    assert code == 1 and data["level"] == "none"
    assert "serving track" in runner.invoke(app, ["rubric"]).output


@pytest.mark.slow  # the CLI as a process
def test_reports_stay_readable_in_an_ascii_terminal_without_colour():
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONIOENCODING="ascii", NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "grade", str(REFERENCE), "--level", "L4"],
        capture_output=True,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode("ascii")  # raises if anything is not ASCII
    assert "Partial run: items append-time-dim, attend-shape pass" in text and "\x1b[" not in text


# --- grade-all on a folder an attacker prepared ------------------------------------------------

SECRET = "kata-secret-b52c07"
_spec = importlib.util.spec_from_file_location(
    "submissions_tree", ROOT / "tests" / "hostile" / "submissions_tree.py"
)
TREE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TREE)


@pytest.mark.slow
def test_grade_all_on_a_hostile_tree_leaks_no_secret_and_writes_only_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    graded = TREE.build(
        tmp_path / "subs",
        tmp_path / "outside",
        (ROOT / "starter" / "kv_cache.py").read_text(),
        SECRET,
    )
    outside_before = sorted(p.relative_to(tmp_path) for p in (tmp_path / "outside").rglob("*"))
    done = runner.invoke(
        app,
        [
            "grade-all",
            "subs",
            "--out",
            "out",
            "--jobs",
            "2",
            "--sandbox",
            "process",
            "--timeout",
            "5",
        ],
    )
    assert done.exit_code == 0, done.output
    files = {name: (tmp_path / "out" / name).read_bytes() for name in ("summary.csv", "summary.md")}
    for text in (done.output, *(content.decode() for content in files.values())):
        assert SECRET not in text
        assert "\x1b" not in text and "\x07" not in text
    assert (
        sorted(p.relative_to(tmp_path) for p in (tmp_path / "outside").rglob("*")) == outside_before
    ), "nothing was written outside"
    with (tmp_path / "out" / "summary.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(graded) + len(TREE.SKIPPED)
    assert not [
        cell
        for row in rows
        for cell in row.values()
        if cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    ]
    levels = {row["submission"]: row["level"] for row in rows}
    assert levels["not-utf8-\\xff\\xfe"] == levels["plain"] == levels["alias"] == "below L4"
    for name, reason in TREE.SKIPPED.items():
        assert levels[name] == "" and reason in next(
            row["error"] for row in rows if row["submission"] == name
        )
        assert any(
            line.startswith(name[:15]) and "not graded" in line for line in done.output.splitlines()
        ), f"{name} is not listed as skipped"
    assert max(len(line) for line in done.output.splitlines()) <= 80
    assert done.output.splitlines()[-1] == (
        "wrote out/summary.csv and out/summary.md (the full table)"
    )


def test_grade_all_checks_out_before_it_grades_anything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stand_in(monkeypatch, lambda request, on_item: pytest.fail("graded before --out"))
    (tmp_path / "in" / "alice").mkdir(parents=True)
    shutil.copy(REFERENCE, tmp_path / "in" / "alice" / "kv_cache.py")
    done = runner.invoke(app, ["grade-all", "in", "--out", "/proc/nope", "--sandbox", "process"])
    assert done.exit_code == 2, done.output
    assert done.output.splitlines() == [
        line
        for line in done.output.splitlines()
        if line.startswith("kata: error: --out: cannot write in")
    ]
    assert len(done.output.strip().splitlines()) == 1


def test_an_interrupted_batch_keeps_the_grades_it_finished(tmp_path, monkeypatch):
    """Grades one at a time; the second is interrupted (Ctrl-C): the first is in both summaries."""
    monkeypatch.chdir(tmp_path)
    for name in ("alice", "bob", "carol"):
        (tmp_path / "in" / name).mkdir(parents=True)
        shutil.copy(REFERENCE, tmp_path / "in" / name / "kv_cache.py")
    finished = judge.GradeResult("kv_cache.py", "L6", [], [], False)

    def grade(request, on_item):
        if "bob" in str(request.implementation):
            raise KeyboardInterrupt
        return finished

    stand_in(monkeypatch, grade)
    done = runner.invoke(
        app, ["grade-all", "in", "--out", "out", "--jobs", "1", "--sandbox", "process"]
    )
    assert isinstance(done.exception, KeyboardInterrupt) or done.exit_code != 0
    with (tmp_path / "out" / "summary.csv").open(newline="") as f:
        assert [(row["submission"], row["level"]) for row in csv.DictReader(f)] == [("alice", "L6")]
    assert "`alice` | L6" in (tmp_path / "out" / "summary.md").read_text()


def test_a_tree_where_everything_is_skipped_exits_2_saying_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.txt").write_text(SECRET)
    (tmp_path / "in" / "mallory").mkdir(parents=True)
    (tmp_path / "in" / "mallory" / "kv_cache.py").symlink_to(tmp_path / "secret.txt")
    done = runner.invoke(app, ["grade-all", "in", "--sandbox", "process"])
    assert done.exit_code == 2 and len(done.output.strip().splitlines()) == 1, done.output
    assert "1 skipped: kv_cache.py is a link to a file outside" in done.output
    assert SECRET not in done.output and not (tmp_path / "summary.csv").exists()


def test_a_summary_that_can_no_longer_be_written_ends_the_batch_with_one_line(
    tmp_path, monkeypatch
):
    import errno

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in" / "alice").mkdir(parents=True)
    shutil.copy(REFERENCE, tmp_path / "in" / "alice" / "kv_cache.py")
    stand_in(monkeypatch, lambda request, on_item: judge.GradeResult("k", "L6", [], [], False))

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(batch, "write_summary", disk_full)
    done = runner.invoke(app, ["grade-all", "in", "--out", "out", "--sandbox", "process"])
    assert done.exit_code == 2, done.output
    assert done.output.strip() == (
        "kata: error: --out: cannot write the summary: No space left on device"
    )
