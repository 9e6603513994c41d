"""An interviewer's grader folder is checked whole before anything is graded.

A file that cannot be used would otherwise crash the tool, or, worse, never run while its item
shows PASS (a misspelled ITEM). Each problem is exit 2 and one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from graders.judge.grade import PrivateGraderError, private_graders
from graders.shared.tracks import DENSE, SERVING

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "kv_cache.py"
GOOD = 'ITEM = "prefix-equivalence"\n\ndef grade(candidate):\n    return "fine"\n'

PROBLEMS = {
    "no-item": ("def grade(candidate):\n    return 'fine'\n", "defines no ITEM"),
    "misspelled-item": (
        GOOD.replace("equivalence", "equivalnce"),
        "ITEM 'prefix-equivalnce' is not an item of the dense track",
    ),
    "item-not-a-string": (
        "ITEM = 3\n\ndef grade(candidate):\n    return 'fine'\n",
        "defines no ITEM",
    ),
    "no-grade": ('ITEM = "gqa"\n', "defines no grade(candidate) function"),
    "grade-not-callable": ('ITEM = "gqa"\ngrade = "yes"\n', "defines no grade(candidate) function"),
    "raises-on-import": (
        GOOD + "raise RuntimeError('no data file')\n",
        "raises on import: RuntimeError: no data file",
    ),
    "syntax-error": (GOOD + "def broken(:\n", "raises on import: SyntaxError"),
    "exits-on-import": (GOOD + "import sys\nsys.exit(3)\n", "raises on import: SystemExit: 3"),
}


def folder_with(tmp_path: Path, source: str, name: str = "case.py") -> Path:
    folder = tmp_path / "graders"
    folder.mkdir(exist_ok=True)
    (folder / "a_good_one.py").write_text(GOOD)
    (folder / name).write_text(source)
    return folder


@pytest.mark.parametrize("source, says", PROBLEMS.values(), ids=PROBLEMS.keys())
def test_a_grader_that_cannot_be_used_names_its_file_and_problem(tmp_path, source, says):
    folder = folder_with(tmp_path, source)
    with pytest.raises(PrivateGraderError) as raised:
        private_graders(folder, DENSE)
    message = str(raised.value)
    assert message.startswith(str(folder / "case.py") + ": ") and says in message, message
    assert "\n" not in message


def test_an_item_of_the_other_track_is_refused(tmp_path):
    folder = folder_with(
        tmp_path, 'ITEM = "paged-free"\n\ndef grade(candidate):\n    return "ok"\n'
    )
    with pytest.raises(PrivateGraderError, match="not an item of the dense track"):
        private_graders(folder, DENSE)
    with pytest.raises(
        PrivateGraderError, match="'prefix-equivalence' is not an item of the serving"
    ):
        private_graders(folder, SERVING)


def test_usable_graders_load_in_name_order_as_hidden_and_underscored_files_are_skipped(tmp_path):
    folder = folder_with(tmp_path, 'ITEM = "gqa"\n\ndef grade(candidate):\n    return "ok"\n')
    (folder / "_helpers.py").write_text("raise RuntimeError('a helper is not a grader')\n")
    loaded = private_graders(folder, DENSE)
    assert [(g.item, g.hidden) for g in loaded] == [("prefix-equivalence", True), ("gqa", True)]


@pytest.mark.parametrize(
    "source, says",
    [PROBLEMS["misspelled-item"], PROBLEMS["raises-on-import"]],
    ids=["misspelled-item", "raises-on-import"],
)
def test_the_cli_exits_2_with_one_line_before_grading(tmp_path, source, says):
    folder = folder_with(tmp_path, source)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        app, ["grade", str(REFERENCE), "--hidden", "--graders", str(folder), "--json", str(out)]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip().startswith("kata: error: --graders: ") and says in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists(), "nothing was graded, so nothing is written"
