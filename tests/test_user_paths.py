"""Every path the user types is the user's (the kata contract, section 3), and every output is
checked before any work starts and written whole.

The commands run from a temporary folder that is not the kata's, the CLI in-process with the
working directory changed. The real `kata` command, installed from the wheel, grades relative
paths and printed solutions in tests/test_wheel.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

import graders.judge.grade as judge
from benchmarks import bench
from cli import app
from graders.judge.workers import GradeWorkers
from graders.shared import output_files
from graders.shared.output_files import OutputError, check_writable, write_atomically
from graders.workflows import batch

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "kv_cache.py"
STARTER = ROOT / "starter" / "kv_cache.py"
PRIVATE_GRADERS = ROOT / "docs" / "examples" / "private_graders"
runner = CliRunner()


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A fresh folder, outside the kata, that the commands run in."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def kata(*args: str) -> Result:
    """`kata ARGS` in-process, from the current folder."""
    return runner.invoke(app, list(args))


def statuses(report: Path) -> dict[str, str]:
    return {item["id"]: item["status"] for item in json.loads(report.read_text())["items"]}


def place(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


# --- every path argument and option is relative to the folder the command runs in ------------


def test_grade_in_a_workspace_made_by_init_grades_the_workspaces_file(here, monkeypatch):
    made = kata("init", "ws")
    assert made.exit_code == 0, made.output
    monkeypatch.chdir(here / "ws")
    result = kata("grade", "kv_cache.py", "--item", "append-time-dim", "--json", "r.json")
    assert result.exit_code == 1, result.output
    assert statuses(here / "ws" / "r.json") == {"append-time-dim": "not_attempted"}
    assert json.loads((here / "ws" / "r.json").read_text())["implementation"] == "kv_cache.py"


def test_a_local_solutions_folder_is_the_users_not_the_katas(here):
    place(STARTER, here / "solutions" / "kv_cache.py")  # the kata's own reference would pass
    result = kata("grade", "solutions/kv_cache.py", "--item", "attend-shape", "--json", "r.json")
    assert result.exit_code == 1, result.output
    assert statuses(here / "r.json") == {"attend-shape": "not_attempted"}


def test_tests_option_is_relative_to_the_folder(here):
    place(REFERENCE, here / "impl" / "kv_cache.py")
    (here / "mine").mkdir()
    (here / "mine" / "checks.py").write_text("def test_nothing():\n    pass\n")
    result = kata(
        "grade",
        "impl/kv_cache.py",
        "--tests",
        "mine/checks.py",
        "--item",
        "own-tests",
        "--json",
        "r.json",
    )
    assert result.exit_code == 1, result.output
    (item,) = json.loads((here / "r.json").read_text())["items"]
    assert item["status"] == "fail" and "bundled wrong implementations" in item["message"], item


def test_graders_option_is_relative_to_the_folder(here):
    place(REFERENCE, here / "kv_cache.py")
    shutil.copytree(PRIVATE_GRADERS, here / "my_graders")
    result = kata(
        "grade",
        "kv_cache.py",
        "--hidden",
        "--graders",
        "my_graders",
        "--item",
        "prefix-equivalence",
        "--json",
        "r.json",
        "--sandbox",
        "process",
    )
    assert result.exit_code == 0, result.output
    assert json.loads((here / "r.json").read_text())["hidden"] is True


def test_report_files_land_in_the_folder(here):
    place(REFERENCE, here / "kv_cache.py")
    (here / "out").mkdir()
    result = kata(
        "grade",
        "kv_cache.py",
        "--level",
        "L4",
        "--json",
        "out/r.json",
        "--markdown",
        "out/card.md",
        "--junit",
        "out/junit.xml",
    )
    assert result.exit_code == 0, result.output
    assert statuses(here / "out" / "r.json") == {"append-time-dim": "pass", "attend-shape": "pass"}
    assert "append-time-dim" in (here / "out" / "card.md").read_text()
    assert ET.parse(here / "out" / "junit.xml").getroot().tag == "testsuites"
    assert sorted(p.name for p in (here / "out").iterdir()) == ["card.md", "junit.xml", "r.json"]


def test_gradescope_results_default_to_the_folder(here):
    place(REFERENCE, here / "kv_cache.py")
    result = kata("grade", "kv_cache.py", "--level", "L4", "--format", "gradescope")
    assert result.exit_code == 0, result.output
    assert json.loads((here / "results.json").read_text())["score"] == 10


def test_grade_all_reads_and_writes_relative_folders(here):
    place(REFERENCE, here / "in" / "alice" / "kv_cache.py")
    result = kata("grade-all", "in", "--out", "summary", "--jobs", "1", "--sandbox", "process")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (here / "summary").iterdir()) == [
        "index.html",
        "pages",
        "summary.csv",
        "summary.md",
    ]
    assert "alice" in (here / "summary" / "summary.csv").read_text()


@pytest.mark.slow
def test_bench_file_json_and_plot_are_relative_to_the_folder(here):
    place(REFERENCE, here / "mine" / "kv_cache.py")
    result = kata(
        "bench",
        "mine/kv_cache.py",
        "--lengths",
        "16",
        "--dtypes",
        "float32",
        "--shapes",
        "mha",
        "--subjects",
        "bare",
        "--warmup",
        "1",
        "--reps",
        "1",
        "--json",
        "bench.json",
        "--plot",
        "bench.png",
    )
    assert result.exit_code == 0, result.output
    (cell,) = json.loads((here / "bench.json").read_text())["cells"]
    assert set(cell["results"]) == {"bare", "kv_cache"}, cell["results"]
    assert (here / "bench.png").read_bytes().startswith(b"\x89PNG")


def test_init_makes_the_workspace_in_the_folder(here):
    result = kata("init", "a/b")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (here / "a" / "b").iterdir()) == [
        ".gitignore",
        "README.md",
        "kv_cache.py",
        "paged_kv_cache.py",
        "scheduler.py",
        "test_kv_cache.py",
    ]
    assert "created a/b/kv_cache.py" in result.output and "cd a/b && kata grade" in result.output


# --- usage errors about paths: one line, exit 2, nothing left behind ---------------------------


def test_grade_outside_a_workspace_says_what_to_do(here):
    result = kata("grade")
    assert result.exit_code == 2
    line = one_line(result)
    assert "no kv_cache.py here" in line and "kata init DIR" in line and "kata grade PATH" in line
    assert "starter" not in line, "it must not blame the kata's own starter file"


def test_init_on_a_file_is_a_one_line_error(here):
    (here / "afile").write_text("mine\n")
    result = kata("init", "afile")
    assert result.exit_code == 2
    assert "afile is a file" in one_line(result) and "Errno" not in result.output
    assert (here / "afile").read_text() == "mine\n"


def test_init_under_a_file_creates_nothing(here):
    (here / "afile").write_text("mine\n")
    result = kata("init", "afile/deeper/ws")
    assert result.exit_code == 2
    assert "afile is a file" in one_line(result)
    assert [p.name for p in here.rglob("*")] == ["afile"]


def test_an_init_that_fails_halfway_leaves_no_folder_behind(here, monkeypatch):
    real_copy, copied = shutil.copyfile, []

    def copy_once(source, target):
        if copied:
            raise PermissionError(13, "Permission denied", str(target))
        copied.append(target)
        return real_copy(source, target)

    monkeypatch.setattr(shutil, "copyfile", copy_once)
    result = kata("init", "deep/ws")
    assert result.exit_code == 2
    assert "Permission denied" in one_line(result) and len(copied) == 1
    assert list(here.iterdir()) == [], "neither the copied file nor the folders made are left"


# --- outputs are checked before any work -------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if any grading or benching starts."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the outputs were checked")

    monkeypatch.setattr(GradeWorkers, "start", classmethod(refuse))
    monkeypatch.setattr(judge, "grade", refuse)
    monkeypatch.setattr(batch, "grade_all", refuse)
    monkeypatch.setattr(bench, "run", refuse)


BENCH = [
    "bench",
    "kv_cache.py",
    "--lengths",
    "16",
    "--dtypes",
    "float32",
    "--shapes",
    "mha",
    "--subjects",
    "bare",
]


@pytest.mark.parametrize(
    "args, says",
    [
        (["grade", "kv_cache.py", "--json", "/no/such/dir/r.json"], "--json: cannot write"),
        (["grade", "kv_cache.py", "--json", "a_folder"], "--json: cannot write"),
        (["grade", "kv_cache.py", "--markdown", "/no/such/dir/s.md"], "--markdown: cannot write"),
        (["grade", "kv_cache.py", "--junit", "a_folder"], "--junit: cannot write"),
        (
            ["grade", "kv_cache.py", "--format", "gradescope", "--json", "a_folder"],
            "--json: cannot",
        ),
        (["grade-all", "in", "--out", "a_file"], "--out: cannot write in"),
        (["grade-all", "in", "--out", "a_file/summary"], "--out: cannot write in"),
        (["grade-all", "in", "--out", "a_folder_holding_summary_md_as_a_folder"], "--out: cannot"),
        ([*BENCH, "--json", "/no/such/dir/b.json"], "--json: cannot write"),
        ([*BENCH, "--plot", "a_folder"], "--plot: cannot write"),
    ],
    ids=[
        "json-no-dir",
        "json-is-dir",
        "markdown-no-dir",
        "junit-is-dir",
        "gradescope-is-dir",
        "out-is-file",
        "out-under-file",
        "out-summary-is-dir",
        "bench-json-no-dir",
        "bench-plot-is-dir",
    ],
)
def test_an_output_that_cannot_be_written_stops_the_command_before_work(here, no_work, args, says):
    place(REFERENCE, here / "kv_cache.py")
    place(REFERENCE, here / "in" / "alice" / "kv_cache.py")
    (here / "a_folder").mkdir()
    (here / "a_file").write_text("")
    (here / "a_folder_holding_summary_md_as_a_folder" / "summary.md").mkdir(parents=True)
    before = sorted(here.rglob("*"))
    result = kata(*args)
    assert result.exit_code == 2, result.output
    assert says in one_line(result)
    assert sorted(here.rglob("*")) == before, "a refused command created nothing"


def one_line(result) -> str:
    """The error a command printed, asserting it is one line starting with 'kata'."""
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kata"), result.output
    return lines[0]


# --- check_writable and write_atomically -------------------------------------------------------


@pytest.mark.parametrize(
    "name, says",
    [
        ("missing/r.json", "does not exist"),
        ("a_folder", "is a folder"),
        ("a_file/r.json", "does not exist"),
    ],
    ids=["no-folder", "is-folder", "folder-is-a-file"],
)
def test_check_writable_refuses_with_one_line(tmp_path, name, says):
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(OutputError, match=says) as raised:
        check_writable(tmp_path / name)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("name", ["new.json", "existing.json"], ids=["new", "existing"])
def test_check_writable_accepts_a_file_it_could_write_and_creates_nothing(tmp_path, name):
    (tmp_path / "existing.json").write_text("old")
    check_writable(tmp_path / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.json"]


def test_write_atomically_replaces_the_whole_file_and_keeps_its_mode(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    target.chmod(0o640)
    write_atomically(target, "new ✓\r\n")
    assert target.read_bytes() == "new ✓\r\n".encode()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"], "no temporary file left"


def test_write_atomically_gives_a_new_file_the_usual_mode(tmp_path):
    write_atomically(tmp_path / "new.bin", b"\x00\x01")
    assert (tmp_path / "new.bin").read_bytes() == b"\x00\x01"
    assert stat.S_IMODE((tmp_path / "new.bin").stat().st_mode) == 0o666 & ~output_files._UMASK


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "report.json"
    target.write_text("old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


@pytest.fixture
def replaced(monkeypatch) -> list[Path]:
    """The targets written through os.replace, as write_atomically writes them."""
    targets, real = [], os.replace

    def spy(source, target):
        targets.append(Path(target))
        real(source, target)

    monkeypatch.setattr(os, "replace", spy)
    return targets


def test_every_report_of_grade_is_written_atomically(here, replaced):
    place(REFERENCE, here / "kv_cache.py")
    result = kata(
        "grade",
        "kv_cache.py",
        "--level",
        "L4",
        "--json",
        "r.json",
        "--markdown",
        "card.md",
        "--junit",
        "junit.xml",
        "--html",
        "page.html",
    )
    assert result.exit_code == 0, result.output
    gradescope = kata("grade", "kv_cache.py", "--level", "L4", "--format", "gradescope")
    assert gradescope.exit_code == 0, gradescope.output
    assert [p for p in replaced if p.parent == here] == [
        here / "r.json",
        here / "card.md",
        here / "junit.xml",
        here / "page.html",
        here / "results.json",
    ]
    assert json.loads((here / "r.json").read_text())["implementation"] == "kv_cache.py"


def test_the_summaries_of_grade_all_are_written_atomically(here, replaced):
    place(REFERENCE, here / "in" / "alice" / "kv_cache.py")
    result = kata("grade-all", "in", "--out", "out", "--jobs", "1", "--sandbox", "process")
    assert result.exit_code == 0, result.output
    assert [p for p in replaced if p.parent == here / "out"] == [
        here / "out" / "summary.csv",
        here / "out" / "summary.md",
        here / "out" / "index.html",
    ]
    assert here / "out" / "pages" / "001.html" in replaced


def test_the_json_of_bench_is_written_atomically(here, replaced):
    result = kata(
        "bench",
        "--lengths",
        "16",
        "--dtypes",
        "float32",
        "--shapes",
        "mha",
        "--subjects",
        "bare",
        "--warmup",
        "1",
        "--reps",
        "1",
        "--json",
        "b.json",
    )
    assert result.exit_code == 0, result.output
    assert [p for p in replaced if p.parent == here] == [here / "b.json"]
    assert json.loads((here / "b.json").read_text())["kata_bench"] == 1
