"""`kata grade --ff` and `--lf`: the last grade's failures, kept beside the graded file in
.kata_cache/last.json (ignored by git), run first or alone as pytest's --ff and --lf do; a
missing or broken record means every item runs; the order changes no verdict, and the report
keeps the rubric's order."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from graders.judge.result import GradeResult, ItemResult
from tests.grading import grade, stand_in
from graders.shared.rubric import load
from graders.shared.tracks import DENSE, SERVING
from graders.workflows import last_failed
from graders.workflows.last_failed import Selection, cache_file, failed, plan, record

ROOT = Path(__file__).resolve().parent.parent
CONCAT = ROOT / "solutions" / "concat_kv_cache.py"
runner = CliRunner()


def result(statuses: dict[str, str], track: str = DENSE.id, hidden: bool = False) -> GradeResult:
    levels = {item.id: item.level for item in load().items}
    items = [ItemResult(id, levels[id], status, 0.0, 1.0, "") for id, status in statuses.items()]
    return GradeResult("kv_cache.py", None, items, [], hidden, track=track, partial=True)


@pytest.fixture
def implementation(tmp_path) -> Path:
    path = tmp_path / "kv_cache.py"
    path.write_text("")
    return path


# --- the record --------------------------------------------------------------------------------


def test_the_record_is_beside_the_file_and_ignored_by_git(implementation):
    record(implementation, result({"gqa": "fail", "reset": "pass"}))
    folder = implementation.parent / ".kata_cache"
    assert cache_file(implementation) == folder / "last.json"
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "last.json"], "no temp file"
    assert (folder / ".gitignore").read_text().splitlines()[-1] == "*"
    assert failed(implementation, DENSE.id) == {"gqa"}


def test_the_record_merges_what_this_grade_left_out(implementation):
    record(implementation, result({"gqa": "fail", "reset": "timeout", "release": "pass"}))
    record(implementation, result({"gqa": "pass", "release": "not_attempted"}))  # --item, say
    assert failed(implementation, DENSE.id) == {"reset", "release"}


def test_each_file_and_track_has_its_own_record(implementation):
    record(implementation, result({"gqa": "fail"}))
    paged = implementation.with_name("paged_kv_cache.py")
    record(paged, result({"paged-cow": "fail"}, track=SERVING.id))
    assert failed(implementation, DENSE.id) == {"gqa"}
    assert failed(paged, SERVING.id) == {"paged-cow"} and failed(paged, DENSE.id) == set()


def test_a_hidden_grade_is_not_recorded(implementation):
    record(implementation, result({"gqa": "fail"}, hidden=True))
    assert not (implementation.parent / ".kata_cache").exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\xff\xfe garbage",
        b"[1, 2]",
        b'{"version": 1}',
        b'{"version": 99, "failed": {}}',
        b'{"version": 1, "failed": []}',
        b'{"version": 1, "failed": {"kv_cache.py": 3}}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=[
        "empty",
        "not-utf8",
        "a-list",
        "no-failed",
        "other-version",
        "failed-a-list",
        "file-not-a-dict",
        "nested-too-deep",
    ],
)
def test_a_broken_record_reads_as_none_and_is_replaced(implementation, content):
    cache_file(implementation).parent.mkdir()
    cache_file(implementation).write_bytes(content)
    assert failed(implementation, DENSE.id) == set()
    record(implementation, result({"gqa": "fail"}))
    assert failed(implementation, DENSE.id) == {"gqa"}


def test_a_record_that_cannot_be_read_or_written_is_no_record(implementation):
    (implementation.parent / ".kata_cache").write_text("a file where the folder would be")
    record(implementation, result({"gqa": "fail"}))  # no exception: the grade goes on
    assert failed(implementation, DENSE.id) == set()
    (implementation.parent / ".kata_cache").unlink()
    cache_file(implementation).mkdir(parents=True)  # a folder where the file would be
    assert failed(implementation, DENSE.id) == set()


def _planted_record() -> bytes:
    return json.dumps({"version": 1, "failed": {"kv_cache.py": {"dense": ["gqa"]}}}).encode()


def test_a_cache_folder_that_is_a_link_is_neither_read_nor_written(implementation, tmp_path):
    """A candidate (or anyone) made `.kata_cache` a link to a folder of the user's: the judge
    reads no record planted there and writes nothing there; the grade goes on."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "last.json").write_bytes(_planted_record())
    (implementation.parent / ".kata_cache").symlink_to(elsewhere, target_is_directory=True)
    assert failed(implementation, DENSE.id) == set(), "a record read through the link"
    record(implementation, result({"reset": "fail"}))
    assert sorted(p.name for p in elsewhere.iterdir()) == ["last.json"]
    assert (elsewhere / "last.json").read_bytes() == _planted_record()
    assert (implementation.parent / ".kata_cache").is_symlink()


@pytest.mark.parametrize("name", ["last.json", ".gitignore"])
def test_a_record_file_that_is_a_link_is_replaced_never_written_through(
    implementation, tmp_path, name
):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(_planted_record())
    folder = implementation.parent / ".kata_cache"
    folder.mkdir()
    (folder / name).symlink_to(outside)
    if name == "last.json":
        assert failed(implementation, DENSE.id) == set(), "a record read through the link"
    record(implementation, result({"reset": "fail"}))
    assert outside.read_bytes() == _planted_record(), "written through the link"
    if name == "last.json":
        assert not (folder / name).is_symlink() and failed(implementation, DENSE.id) == {"reset"}


def test_a_record_that_is_a_fifo_reads_as_none_without_blocking(implementation):
    folder = implementation.parent / ".kata_cache"
    folder.mkdir()
    os.mkfifo(folder / "last.json")
    assert failed(implementation, DENSE.id) == set()


# --- what runs --------------------------------------------------------------------------------


def test_failed_first_puts_the_chosen_failures_first_and_runs_every_item(implementation):
    record(implementation, result({"gqa": "fail", "reset": "error", "attend-shape": "pass"}))
    assert plan(implementation, DENSE, None, None, last_failed=False) == Selection(
        None,
        {"reset", "gqa"},
        "--failed-first: grading reset, gqa first, which did not pass last time",
    )
    assert plan(implementation, DENSE, {"gqa", "attend-shape"}, None, last_failed=False).first == {
        "gqa"
    }, "--item chooses first"


def test_last_failed_runs_only_the_chosen_failures(implementation):
    record(implementation, result({"gqa": "fail", "reset": "error"}))
    assert plan(implementation, DENSE, None, None, last_failed=True) == Selection(
        {"reset", "gqa"},
        set(),
        "--last-failed: grading only reset, gqa, which did not pass last time",
    )
    assert plan(implementation, DENSE, None, "L5", last_failed=True).only == {"reset"}


@pytest.mark.parametrize(
    "recorded",
    [None, {"gqa": "pass"}, {"gqa": "fail"}],
    ids=["no-record", "nothing-failed", "none-of-the-chosen-failed"],
)
def test_with_no_failure_to_go_on_every_chosen_item_runs(implementation, recorded):
    if recorded:
        record(implementation, result(recorded))
    only = {"reset", "release"}
    assert plan(implementation, DENSE, only, None, last_failed=True) == Selection(
        only, set(), "--last-failed: no item failed last time: grading every item"
    )
    assert plan(implementation, DENSE, only, None, last_failed=False) == Selection(only, set(), "")


def test_grading_in_another_order_changes_no_verdict_and_reports_in_rubric_order():
    chosen = {"append-time-dim", "prefix-equivalence", "prealloc", "kv-only"}
    plain = grade(CONCAT, only=chosen)
    ran = []
    first = grade(
        CONCAT, only=chosen, first={"prealloc", "kv-only"}, on_item=lambda item: ran.append(item.id)
    )
    assert ran == ["kv-only", "prealloc", "append-time-dim", "prefix-equivalence"]
    assert first.items == plain.items and first.tells == plain.tells
    assert [i.id for i in first.items] == [
        "append-time-dim",
        "prefix-equivalence",
        "kv-only",
        "prealloc",
    ]
    assert [i.status for i in first.items] == ["pass", "pass", "pass", "fail"]
    stopped = grade(CONCAT, only=chosen, first={"prealloc"}, exitfirst=True)
    assert [i.id for i in stopped.items] == ["prealloc"] and stopped.partial


# --- through the CLI ---------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A workspace made by `kata init`, holding the concat solution, the command run in it."""
    assert runner.invoke(app, ["init", str(tmp_path / "ws")]).exit_code == 0
    shutil.copyfile(CONCAT, tmp_path / "ws" / "kv_cache.py")
    monkeypatch.chdir(tmp_path / "ws")
    return tmp_path / "ws"


def kata(*args: str) -> tuple[str, dict]:
    done = runner.invoke(app, [*args, "--json", "report.json"])
    assert done.exit_code in (0, 1) and not isinstance(done.exception, Exception), done.output
    return done.output, json.loads(Path("report.json").read_text())


def test_the_workspace_ignores_the_record_and_lf_grades_only_what_failed(workspace):
    assert ".kata_cache/" in (workspace / ".gitignore").read_text().splitlines()
    _, first = kata("grade", "--item", "attend-shape", "--item", "prealloc")
    assert {i["id"]: i["status"] for i in first["items"]} == {
        "attend-shape": "pass",
        "prealloc": "fail",
    }
    assert failed(workspace / "kv_cache.py", DENSE.id) == {"prealloc"}
    output, again = kata("grade", "--lf")
    assert "--last-failed: grading only prealloc" in output
    assert [i["id"] for i in again["items"]] == ["prealloc"]
    assert again["partial"] is True and again["level"] is None


def test_lf_with_nothing_recorded_grades_every_item_chosen(workspace):
    output, report = kata("grade", "--lf", "--item", "attend-shape")
    assert "no item failed last time: grading every item" in output
    assert [i["id"] for i in report["items"]] == ["attend-shape"]


@pytest.fixture
def seen(monkeypatch) -> dict:
    """graders.judge.grade.grade replaced: records the request's settings and whether the record
    existed while it ran, and returns a grade where reset fails."""
    recorded = {}

    def fake(request, on_item):
        recorded.update(
            first=request.first,
            only=request.only,
            hidden=request.hidden,
            record_during_grade=cache_file(request.implementation).exists(),
        )
        return result({"append-time-dim": "pass", "reset": "fail"}, hidden=request.hidden)

    stand_in(monkeypatch, fake)
    return recorded


def test_the_record_is_written_after_the_grade(workspace, seen):
    kata("grade")
    assert seen["record_during_grade"] is False and seen["first"] == set()
    assert failed(workspace / "kv_cache.py", DENSE.id) == {"reset"}
    kata("grade", "--ff")
    assert seen["record_during_grade"] is True and seen["first"] == {"reset"}
    assert seen["only"] is None


def test_watch_grades_failures_first(workspace, seen, monkeypatch):
    record(workspace / "kv_cache.py", result({"gqa": "fail"}))
    monkeypatch.setattr("graders.workflows.watch.watch", lambda paths, run, **kwargs: run())
    kata("grade", "--watch")
    assert seen["first"] == {"gqa"} and seen["only"] is None


@pytest.mark.parametrize(
    "args, says",
    [
        (["--lf", "--hidden"], "not with --hidden"),
        (["--ff", "--hidden"], "not with --hidden"),
        (["-v", "-q"], "choose one"),
    ],
    ids=["lf-hidden", "ff-hidden", "verbose-quiet"],
)
def test_flags_that_contradict_exit_2(workspace, args, says):
    done = runner.invoke(app, ["grade", *args])
    assert done.exit_code == 2 and says in done.output, done.output


def test_a_hidden_grade_neither_follows_nor_writes_the_record(workspace, seen, monkeypatch):
    monkeypatch.setattr(last_failed, "plan", lambda *args, **kwargs: pytest.fail("planned"))
    monkeypatch.setattr("graders.workflows.watch.watch", lambda paths, run, **kwargs: run())
    kata("grade", "--hidden", "--watch")
    assert seen["first"] == set() and not (workspace / ".kata_cache").exists()


@pytest.mark.slow
def test_a_candidate_that_links_its_cache_outward_gets_no_record_written_there(
    tmp_path, monkeypatch, hostile_file
):
    """tests/hostile/links_its_cache_outward.py, graded in the process fallback as the judge's
    own user (which lets it write beside its file; a root judge's fallback would not), makes
    `.kata_cache` a link to a folder of the user's while it is graded: the judge writes its
    record after the grade, and writes nothing there."""
    monkeypatch.setattr("graders.judge.isolation.worker_user_problem", lambda: "not root")
    target = tmp_path / "users_folder"
    target.mkdir()
    (tmp_path / "ws").mkdir()
    monkeypatch.chdir(tmp_path / "ws")
    hostile_file("links_its_cache_outward", filename="ws/kv_cache.py", TARGET=target)
    done = runner.invoke(
        app, ["grade", "kv_cache.py", "--item", "attend-shape", "--sandbox", "process"]
    )
    assert done.exit_code == 0, done.output
    assert (tmp_path / "ws" / ".kata_cache").is_symlink(), "the candidate planted its link"
    assert list(target.iterdir()) == [], "the judge wrote through the link"
