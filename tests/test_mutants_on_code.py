"""Mutants find their place in the code: rewording or deleting the prose of solutions/ changes none.

Every bundled mutant (graders/dense/mistakes.py, tests/wrong/, the hidden-only ones of test_hidden.py
and test_cli_workflows.py's) is built again on a copy of solutions/ with every comment and
docstring stripped, and on one with every comment reworded, and must give the same source as on
the real solutions. `own-tests`, which builds its mistakes at grade time, still grades on the
stripped copy.
"""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

from graders.dense.mistakes import MISTAKES
from tests.grading import grade
from graders.shared import mutation
from graders.shared.mutation import Mutant, strip_prose
from tests.test_cli_workflows import FIXED_MASK_BUFFER
from tests.test_hidden import MUTANTS as HIDDEN_ONLY
from tests.wrong import everything

SOLUTIONS = mutation.SOLUTIONS  # the real ones, whatever a test points the mutants at
MODEL_TESTS = SOLUTIONS / "test_kv_cache.py"

BUNDLED = {
    **{f"mistakes/{m.name}": m for m in MISTAKES},
    **{
        f"wrong/{w.name}": w.implementation
        for w in everything()
        if isinstance(w.implementation, Mutant)
    },
    **{f"hidden/{case.mutant.name}": case.mutant for case in HIDDEN_ONLY},
    f"cli/{FIXED_MASK_BUFFER.name}": FIXED_MASK_BUFFER,
}


def reword_comments(text: str) -> str:
    """`text` with each comment's text replaced by "reworded", every other character as it was."""
    lines = io.StringIO(text).readlines()
    for token in tokenize.generate_tokens(iter(lines).__next__):
        if token.type == tokenize.COMMENT:
            (row, start), (_, end) = token.start, token.end
            line = lines[row - 1]
            lines[row - 1] = line[:start] + "# reworded" + line[end:]
    return "".join(lines)


REWRITES = {"stripped": strip_prose, "reworded": reword_comments}


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    """Each rewrite's copy of every .py file of solutions/, by the rewrite's name."""
    folders = {}
    for name, rewrite in REWRITES.items():
        folders[name] = tmp_path_factory.mktemp(name)
        for path in SOLUTIONS.glob("*.py"):
            (folders[name] / path.name).write_text(rewrite(path.read_text()))
    return folders


@pytest.fixture(scope="module")
def real_sources() -> dict[str, str]:
    """Each bundled mutant's source, built on the real solutions."""
    return {key: mutant.source() for key, mutant in BUNDLED.items()}


def point_mutants_at(folder: Path, monkeypatch) -> None:
    monkeypatch.setattr(mutation, "REFERENCE", folder / mutation.REFERENCE.name)
    monkeypatch.setattr(mutation, "PAGED_REFERENCE", folder / mutation.PAGED_REFERENCE.name)


def test_the_rewrites_change_the_prose():
    for path in (mutation.REFERENCE, mutation.PAGED_REFERENCE):
        text = path.read_text()
        assert reword_comments(text) != text and "# reworded" in reword_comments(text)
        assert strip_prose(text) != text


def test_mutants_follow_the_reference_where_it_is_pointed(tmp_path, monkeypatch):
    for path in (mutation.REFERENCE, mutation.PAGED_REFERENCE):
        (tmp_path / path.name).write_text(path.read_text() + "\nMOVED = True\n")
    point_mutants_at(tmp_path, monkeypatch)
    dense, paged = BUNDLED["mistakes/no-scale"], BUNDLED["wrong/paged-no-scale"]
    assert "MOVED = True" in dense.source() and "MOVED = True" in paged.source()


@pytest.mark.parametrize("rewrite", REWRITES)
@pytest.mark.parametrize("key", BUNDLED)
def test_a_mutant_is_the_same_on_solutions_without_their_prose(
    key, rewrite, copies, real_sources, monkeypatch
):
    point_mutants_at(copies[rewrite], monkeypatch)
    assert BUNDLED[key].source() == real_sources[key], f"{key} changed with the {rewrite} prose"


def test_own_tests_grades_on_the_stripped_reference(copies, monkeypatch):
    point_mutants_at(copies["stripped"], monkeypatch)
    result = grade(copies["stripped"] / "kv_cache.py", MODEL_TESTS, only={"own-tests"})
    (item,) = result.items
    assert not result.grader_broke, item.message
    assert item.status == "pass", item.message
