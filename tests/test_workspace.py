"""A candidate's workspace: the starter files and a README, never solutions or graders; and
the instructions in it, run as written."""

import ast
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from tests.grading import grade
from graders.shared import bundled
from graders.shared.rubric import load
from graders.shared.tracks import DENSE
from graders.workflows.workspace import README, default_target, init_workspace

ROOT = Path(__file__).resolve().parent.parent
FILES = {
    "kv_cache.py",
    "test_kv_cache.py",
    "paged_kv_cache.py",
    "scheduler.py",
    "README.md",
    ".gitignore",
}


def body_lines(path: Path) -> set[str]:
    """The stripped source lines of every function body in `path`, docstrings left out."""
    text = path.read_text()
    source, lines = text.splitlines(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            if body:
                lines |= {line.strip() for line in source[body[0].lineno - 1 : body[-1].end_lineno]}
    return lines


def secret_lines() -> set[str]:
    """Distinctive lines of the solutions' and graders' function bodies that the starter lacks."""
    secret = set()
    for path in [*ROOT.glob("solutions/*.py"), *ROOT.glob("graders/**/*.py")]:
        secret |= body_lines(path)
    given = {
        line.strip() for path in ROOT.glob("starter/*.py") for line in path.read_text().splitlines()
    }
    return {line for line in secret - given if len(line) >= 30}


@pytest.fixture
def workspace(tmp_path):
    target = tmp_path / "me" / "kata"
    return target, init_workspace(target)


def test_init_writes_the_starter_files_and_a_readme(workspace):
    target, written = workspace
    assert {p.name for p in target.iterdir()} == {p.name for p in written} == FILES
    for name in ("kv_cache.py", "test_kv_cache.py", "paged_kv_cache.py", "scheduler.py"):
        assert (target / name).read_text() == (ROOT / "starter" / name).read_text()
    readme = (target / "README.md").read_text()
    for says in (
        "L4",
        "L5",
        "L6",
        "kata grade --watch",
        "--item",
        "--level",
        "-x",
        "kata hint",
        "kata rubric",
        "--track serving",
        "--track batching",
    ):
        assert says in readme


def test_init_never_overwrites_a_candidates_work(workspace):
    target, _ = workspace
    (target / "kv_cache.py").write_text("# my work\n")
    with pytest.raises(FileExistsError, match="kv_cache.py"):
        init_workspace(target)
    assert (target / "kv_cache.py").read_text() == "# my work\n"


@pytest.mark.parametrize("name", ["kv_cache.py", "README.md", ".gitignore"])
def test_init_never_writes_through_a_link_even_to_nothing(tmp_path, name):
    outside = tmp_path / "outside" / "planted"
    (tmp_path / "outside").mkdir()
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / name).symlink_to(outside)
    if name == ".gitignore":
        init_workspace(tmp_path / "ws")  # a .gitignore there is left as it is
    else:
        with pytest.raises(FileExistsError, match=name):
            init_workspace(tmp_path / "ws")
    assert not outside.exists() and (tmp_path / "ws" / name).is_symlink()


def test_no_solution_or_grader_code_in_the_workspace(workspace):
    target, _ = workspace
    secret = secret_lines()
    assert len(secret) > 100  # the check has something to find
    for path in target.iterdir():
        leaked = {line.strip() for line in path.read_text().splitlines()} & secret
        assert not leaked, f"{path.name} holds solution or grader code: {sorted(leaked)[:3]}"


def test_the_workspace_grades_as_not_attempted(workspace):
    target, _ = workspace
    implementation, tests = default_target(target)
    result = grade(implementation, tests, only={"append-time-dim"})
    assert [(i.id, i.status) for i in result.items] == [("append-time-dim", "not_attempted")]


def test_default_target_inside_and_outside_a_workspace(workspace, tmp_path):
    target, _ = workspace
    assert default_target(target) == (target / "kv_cache.py", target / "test_kv_cache.py")
    (target / "test_kv_cache.py").unlink()
    assert default_target(target) == (target / "kv_cache.py", None)
    assert default_target(ROOT) == (ROOT / "starter/kv_cache.py", ROOT / "starter/test_kv_cache.py")
    assert default_target(tmp_path) is None, "outside a workspace and a checkout: nothing"


def test_init_on_a_file_or_under_one_raises_and_writes_nothing(tmp_path):
    (tmp_path / "afile").write_text("mine\n")
    for target in (tmp_path / "afile", tmp_path / "afile" / "ws"):
        with pytest.raises(FileExistsError, match="afile is a file, not a folder"):
            init_workspace(target)
    assert [p.name for p in tmp_path.iterdir()] == ["afile"]
    assert (tmp_path / "afile").read_text() == "mine\n"


def test_a_failed_init_removes_what_it_made_and_keeps_what_was_there(tmp_path, monkeypatch):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep\n")

    def disk_full(source, target):
        Path(target).write_text("half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        init_workspace(tmp_path / "mine" / "new" / "ws")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "mine",
        "mine/notes.txt",
    ]


# --- the instructions a candidate reads, run as written -----------------------------------------


def readme_commands() -> list[str]:
    """The commands of the workspace README's bash block, comments left out."""
    (block,) = re.findall(r"```bash\n(.*?)```", README, re.S)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def starter_test_command() -> str:
    """The command the starter test file's docstring gives to run it."""
    docstring = ast.get_docstring(ast.parse((bundled.STARTER / "test_kv_cache.py").read_text()))
    (command,) = re.findall(r"`(python -m pytest[^`]*)`", docstring)
    return command


LEVEL_OF = {item.id: item.level for item in load().track(DENSE)}
WHAT_EACH_GRADES = {  # the README's comment on each command, as the items the report holds
    "kata grade": set(LEVEL_OF),
    "kata grade --watch": set(LEVEL_OF),
    "kata grade --lf": set(LEVEL_OF),  # a fresh workspace: nothing failed yet, every item runs
    "kata grade --item prefix-equivalence": {"prefix-equivalence"},
    "kata grade --level L5": {i for i, level in LEVEL_OF.items() if level in ("L4", "L5")},
    "kata grade -x": {"append-time-dim"},
}


@pytest.mark.parametrize("command", [c for c in readme_commands() if c.startswith("kata ")])
def test_each_kata_command_of_the_workspace_readme_grades_what_it_says(
    command, workspace, monkeypatch
):
    assert command in WHAT_EACH_GRADES, f"the README has a new command: say what {command!r} grades"
    target, _ = workspace
    monkeypatch.chdir(target)
    monkeypatch.setattr("graders.workflows.watch.watch", lambda paths, run, **kwargs: run())
    result = CliRunner().invoke(app, [*shlex.split(command)[1:], "--json", "report.json"])
    assert result.exit_code in (0, 1), result.output
    report = json.loads((target / "report.json").read_text())
    assert {i["id"] for i in report["items"]} == WHAT_EACH_GRADES[command]
    assert {i["status"] for i in report["items"]} == {"not_attempted"}, "the stubs, not errors"


@pytest.mark.slow  # runs pytest as a process, which imports torch
@pytest.mark.parametrize(
    "command",
    sorted({starter_test_command()} | {c for c in readme_commands() if c.startswith("python ")}),
)
def test_the_documented_pytest_command_runs_the_starter_tests_in_a_workspace(command, workspace):
    target, _ = workspace
    argv = [sys.executable, *shlex.split(command)[1:], "-p", "no:cacheprovider"]
    done = subprocess.run(argv, cwd=target, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 failed" in done.stdout and "NotImplementedError" in done.stdout, done.stdout
