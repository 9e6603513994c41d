"""`from kvkata import grade`: the grade of `kata grade`, from Python, shown as its report.

No Jupyter here: the tests call the hooks Jupyter and rich call (`_repr_mimebundle_`,
`__rich_console__`) and compare what they show with the report `kata grade` prints.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

import kvkata
from cli import app
from graders.formats import report

ROOT = Path(__file__).resolve().parent.parent
ITEMS = ["attend-shape", "own-tests"]  # quick ones; own-tests needs the test file beside


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A folder holding the reference and its tests, side by side, and the current folder."""
    for name, source in (("kv_cache.py", "kv_cache.py"), ("test_kv_cache.py", "test_kv_cache.py")):
        shutil.copy(ROOT / "solutions" / source, tmp_path / name)
    shutil.copy(ROOT / "starter" / "kv_cache.py", tmp_path / "starter_kv_cache.py")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def printed(grade: kvkata.Grade, width: int) -> str:
    """The report `kata grade` prints for this grade, at `width` columns, as text."""
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    report.render(grade.result, console, grade.detail, grade.command)
    return console.export_text()


def test_a_relative_path_with_its_tests_beside_it_grades_as_the_cli_does(folder):
    torch.set_num_threads(2)
    graded = kvkata.grade("kv_cache.py", items=ITEMS)
    assert torch.get_num_threads() == 2, "the notebook's torch keeps its threads"
    assert graded.level is None and graded.partial  # some items only: no level
    assert [(i.id, i.status) for i in graded.items] == [(i, "pass") for i in ITEMS]
    assert graded.score == graded.max_score == 12
    assert graded.result.implementation == "kv_cache.py"
    assert graded.command == "kata grade kv_cache.py"

    options = [word for item in ITEMS for word in ("--item", item)]
    done = CliRunner().invoke(app, ["grade", "kv_cache.py", *options, "--json", "cli.json"])
    assert done.exit_code == 0, done.output
    cli_items = json.loads((folder / "cli.json").read_text())["items"]
    assert [(i["id"], i["status"], i["points"]) for i in cli_items] == [
        (i.id, i.status, i.points) for i in graded.items
    ]


def test_a_full_grade_has_a_level_score_and_items(folder):
    graded = kvkata.grade("starter_kv_cache.py")
    assert graded.level == "below L4" and graded.score == 0 and graded.max_score == 100
    assert {i.status for i in graded.items} == {"not_attempted"} and len(graded.items) == 23
    assert repr(graded) == "<kvkata.Grade starter_kv_cache.py: below L4, 0/100 points>"


def test_it_shows_the_terminals_report_in_rich_and_in_jupyter(folder):
    graded = kvkata.grade("kv_cache.py", items=ITEMS)
    console = Console(record=True, width=90, file=io.StringIO(), color_system=None)
    console.print(graded)  # rich calls __rich_console__
    shown = console.export_text()
    assert shown == printed(graded, 90)
    assert "attend-shape" in shown and "Partial run" in shown

    bundle = graded._repr_mimebundle_()  # what Jupyter calls
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"] == printed(graded, kvkata.NOTEBOOK_WIDTH) == str(graded)
    html = bundle["text/html"]
    assert html.startswith("<pre") and "own-tests" in html
    assert "color: #008000" in html  # PASS, in green


def test_a_wrong_call_raises_what_the_cli_refuses(folder):
    with pytest.raises(FileNotFoundError):
        kvkata.grade("nope.py")
    with pytest.raises(ValueError, match="not a Python file"):
        kvkata.grade(".")
    with pytest.raises(ValueError, match="no-such-item"):
        kvkata.grade("kv_cache.py", items=["no-such-item"])
    with pytest.raises(ValueError, match="hidden"):
        kvkata.grade("kv_cache.py", seed=3)
    with pytest.raises(ValueError, match="track"):
        kvkata.grade("kv_cache.py", track="nope")
    with pytest.raises(ValueError, match="detail"):
        kvkata.grade("kv_cache.py", detail="loud")


def test_importing_it_loads_no_torch_of_its_own():
    import subprocess
    import sys

    probe = "import sys, kvkata; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
