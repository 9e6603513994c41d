"""A candidate's workspace: the starter files and a README, never solutions or graders."""

import ast
from pathlib import Path

import pytest

from graders.grade import grade
from graders.workspace import default_target, init_workspace

ROOT = Path(__file__).resolve().parent.parent
FILES = {"kv_cache.py", "test_kv_cache.py", "paged_kv_cache.py", "README.md"}


def body_lines(path: Path) -> set[str]:
    """The stripped source lines of every function body in `path`, docstrings left out."""
    text = path.read_text()
    source, lines = text.splitlines(), set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            if body:
                lines |= {line.strip() for line in source[body[0].lineno - 1:body[-1].end_lineno]}
    return lines


def secret_lines() -> set[str]:
    """Distinctive lines of the solutions' and graders' function bodies that the starter lacks."""
    secret = set()
    for path in [*ROOT.glob("solutions/*.py"), *ROOT.glob("graders/**/*.py")]:
        secret |= body_lines(path)
    given = {line.strip() for path in ROOT.glob("starter/*.py")
             for line in path.read_text().splitlines()}
    return {line for line in secret - given if len(line) >= 30}


@pytest.fixture
def workspace(tmp_path):
    target = tmp_path / "me" / "kata"
    return target, init_workspace(target)


def test_init_writes_the_starter_files_and_a_readme(workspace):
    target, written = workspace
    assert {p.name for p in target.iterdir()} == {p.name for p in written} == FILES
    for name in ("kv_cache.py", "test_kv_cache.py"):
        assert (target / name).read_text() == (ROOT / "starter" / name).read_text()
    readme = (target / "README.md").read_text()
    for says in ("L4", "L5", "L6", "kata grade --watch", "--item", "--level", "-x", "kata hint",
                 "kata rubric"):
        assert says in readme


def test_init_never_overwrites_a_candidates_work(workspace):
    target, _ = workspace
    (target / "kv_cache.py").write_text("# my work\n")
    with pytest.raises(FileExistsError, match="kv_cache.py"):
        init_workspace(target)
    assert (target / "kv_cache.py").read_text() == "# my work\n"


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
    assert default_target(tmp_path)[0] == tmp_path / "starter/kv_cache.py"
