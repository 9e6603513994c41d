"""A borrowed answer is visible: graders.judge.similarity, and the line it gives hidden runs.

The thresholds below come from measurement (the figures print with `pytest -s`): a verbatim copy
reads exactly 1.0, and so does a disguised copy (every name it binds renamed, docstrings
rewritten, comments, blank lines and layout changed); the correct designs of tests/implementations,
written in other styles, 0.01 to 0.19 against the solutions of their track (ADAPTED lists the
ones that borrow part of a solution).
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import io
import time
from pathlib import Path

import pytest
from rich.console import Console

from graders.formats.report import render, to_json
from graders.formats.scorecard import write_markdown
from graders.judge import similarity as sim
from graders.judge.result import GradeResult, ItemResult
from tests.grading import grade
from graders.shared.tracks import DENSE, SERVING

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = {DENSE: ["kv_cache.py", "concat_kv_cache.py"], SERVING: ["paged_kv_cache.py"]}
STARTER = {DENSE: ROOT / "starter/kv_cache.py", SERVING: ROOT / "starter/paged_kv_cache.py"}
ALL = [(track, name) for track, names in SOLUTIONS.items() for name in names]
IMPLEMENTATIONS = sorted((ROOT / "tests/implementations").glob("*.py"))
# Correct designs that are not independent of a solution: they read between the two bands.
ADAPTED = {
    "empty_own_prefix.py": "its decode_step is the reference's with one name changed, "
    "its storage growth the reference's _reserve (measured 0.41)",
}

DISGUISED_AT_LEAST = 0.95  # measured 1.0 for each: room for a disguise this one does not try
INDEPENDENT_AT_MOST = 0.3  # measured at most 0.19 (max_batch.py; sdpa.py 0.16): shared idioms
LINE = "Similarity to the bundled solutions"


def fraction(candidate: str, track, name: str) -> float:
    return sim.fraction(
        candidate, (ROOT / "solutions" / name).read_text(), STARTER[track].read_text()
    )


def track_of(path: Path):
    return SERVING if path.name.startswith("paged") else DENSE


class _Rename(ast.NodeTransformer):
    """Every name the file binds (locals, arguments, functions, classes) and every private
    attribute gets a name of its own; imported names and builtins stay: a copier cannot rename
    torch. Every docstring is rewritten."""

    def __init__(self, tree: ast.Module):
        self.kept = set(dir(builtins)) | {
            (alias.asname or alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        self.names: dict[str, str] = {}

    def new(self, name: str) -> str:
        return name if name in self.kept else self.names.setdefault(name, f"mine_{len(self.names)}")

    def visit_Name(self, node):
        node.id = self.new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self.new(node.arg)
        return self.generic_visit(node)

    def visit_keyword(self, node):
        node.arg = node.arg and self.new(node.arg)
        return self.generic_visit(node)

    def visit_Attribute(self, node):
        if node.attr.startswith("_"):
            node.attr = self.new(node.attr)
        return self.generic_visit(node)

    def visit_FunctionDef(self, node):
        node.name = self.new(node.name)
        return self._redocument(node)

    visit_ClassDef = visit_FunctionDef

    def _redocument(self, node):
        self.generic_visit(node)
        if ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:]
        node.body.insert(0, ast.Expr(ast.Constant(f"In my own words: {node.name} does its job.")))
        return node


def disguised(source: str) -> str:
    """`source` renamed and re-documented (_Rename), printed again by ast.unparse (which drops
    comments and redundant parentheses, and rewraps lines), then indented by 2, with a blank
    line and a comment every few lines."""
    tree = ast.parse(source)
    lines = []
    for i, line in enumerate(ast.unparse(_Rename(tree).visit(tree)).splitlines()):
        body = line.lstrip(" ")
        lines.append(" " * ((len(line) - len(body)) // 2) + body)
        if i % 3 == 0:
            lines.append("")
        if i % 5 == 0:
            lines.append("# my own note about the line above")
    text = "\n".join(lines) + "\n"
    ast.parse(text)  # still Python
    return text


# --- the measure --------------------------------------------------------------------------------


@pytest.mark.parametrize("track, name", ALL)
def test_a_verbatim_copy_reads_exactly_1(track, name):
    assert fraction((ROOT / "solutions" / name).read_text(), track, name) == 1.0


@pytest.mark.parametrize("track, name", ALL)
def test_a_disguised_copy_reads_high(track, name):
    copy = disguised((ROOT / "solutions" / name).read_text())
    assert "mine_0" in copy and "# my own note" in copy
    measured = fraction(copy, track, name)
    print(f"disguised {name}: {measured:.3f}")
    assert measured >= DISGUISED_AT_LEAST


def test_independent_designs_read_low():
    rows = [
        (path.name, name, fraction(path.read_text(), track_of(path), name))
        for path in IMPLEMENTATIONS
        for name in SOLUTIONS[track_of(path)]
    ]
    for implementation, name, measured in rows:
        print(
            f"{implementation} vs solutions/{name}: {measured:.2f}"
            + (f" (adapted: {ADAPTED[implementation]})" if implementation in ADAPTED else "")
        )
    independent = [row for row in rows if row[0] not in ADAPTED]
    assert len(independent) >= 5
    assert all(measured <= INDEPENDENT_AT_MOST for _, _, measured in independent), independent


@pytest.mark.parametrize("track", [DENSE, SERVING])
def test_the_untouched_starter_reads_0(track):
    """The starter's given code is in every candidate's file: it is left out (a base file)."""
    assert all(e["fraction"] == 0.0 for e in sim.similarity(STARTER[track], track))


def test_a_file_that_does_not_tokenize_reads_0(tmp_path):
    source = (ROOT / "solutions/kv_cache.py").read_text() + '\n"""never closed\n'
    assert fraction(source, DENSE, "kv_cache.py") == 0.0
    (tmp_path / "kv_cache.py").write_text(source)
    assert [e["fraction"] for e in sim.similarity(tmp_path / "kv_cache.py", DENSE)] == [0.0, 0.0]


def test_one_entry_a_bundled_solution_of_the_track_and_the_file_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "kv_cache.py"
    path.write_text(
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n"
        + (ROOT / "solutions/kv_cache.py").read_text()
    )
    entries = sim.similarity(path, DENSE)
    assert [e["solution"] for e in entries] == [
        "solutions/kv_cache.py",
        "solutions/concat_kv_cache.py",
    ]
    assert entries[0]["fraction"] >= 0.99 and not marker.exists()
    assert [
        e["solution"] for e in sim.similarity(ROOT / "solutions/paged_kv_cache.py", SERVING)
    ] == ["solutions/paged_kv_cache.py"]


def test_a_huge_file_is_read_only_in_part(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text((ROOT / "solutions/kv_cache.py").read_text() + "# padding\n" * 1_000_000)
    start = time.perf_counter()
    assert sim.similarity(path, DENSE)[0]["fraction"] == 1.0
    assert time.perf_counter() - start < 5.0  # measured 0.05 s (its first 256 KiB)


def test_it_takes_milliseconds():
    start = time.perf_counter()
    sim.similarity(ROOT / "tests/implementations/sdpa.py", DENSE)
    elapsed = time.perf_counter() - start
    print(f"similarity, dense track (two solutions): {elapsed * 1e3:.0f} ms")
    assert elapsed < 1.0  # measured about 25 ms on an idle 2-core machine


# --- where it shows -----------------------------------------------------------------------------

SIMILARITY = [
    {"solution": "solutions/kv_cache.py", "fraction": 0.97},
    {"solution": "solutions/concat_kv_cache.py", "fraction": 0.41},
]


def result(**changes) -> GradeResult:
    item = ItemResult("attend-shape", "L4", "pass", 5.0, 5.0, "ok")
    return dataclasses.replace(
        GradeResult("kv_cache.py", None, [item], [], False, partial=True), **changes
    )


def shown(outcome: GradeResult, tmp_path: Path) -> dict[str, str]:
    console = Console(width=100, file=io.StringIO(), record=True)
    render(outcome, console)
    write_markdown(outcome, tmp_path / "scorecard.md")
    texts = {"report": console.export_text(), "scorecard": (tmp_path / "scorecard.md").read_text()}
    return {output: " ".join(text.split()) for output, text in texts.items()}  # lines unwrapped


def test_a_hidden_run_shows_the_similarity_as_information(tmp_path):
    outcome = result(hidden=True, similarity=SIMILARITY)
    assert to_json(outcome)["similarity"] == SIMILARITY
    for output, text in shown(outcome, tmp_path).items():
        assert LINE in text and "it changes no score" in text, output
        assert "aside): solutions/kv_cache.py 97%, solutions/concat_kv_cache.py 41%." in text, (
            output
        )


def test_other_runs_show_none_and_write_null(tmp_path):
    outcome = result()
    assert "similarity" in to_json(outcome) and to_json(outcome)["similarity"] is None
    for output, text in shown(outcome, tmp_path).items():
        assert LINE not in text, output


def test_grade_measures_it_in_hidden_runs_only():
    path = ROOT / "solutions/kv_cache.py"
    hidden = grade(path, hidden=True, only={"attend-shape"})
    assert hidden.similarity[0] == {"solution": "solutions/kv_cache.py", "fraction": 1.0}
    assert [e["solution"] for e in hidden.similarity][1:] == ["solutions/concat_kv_cache.py"]
    assert grade(path, only={"attend-shape"}).similarity is None
