"""Hostile messages graded through the CLI, under the sandbox `kata grade` chooses: each file in
tests/hostile/ below is a correct cache (or a file that does not import) whose message carries
one attack. The test reads what reached the terminal, in colour (FORCE_COLOR, as in an xterm) and
piped under TERM=dumb, and the JSON, scorecard and JUnit files written beside it: nothing of the
candidate's controls the terminal or renders as Markdown, every file parses, the kata's closing
block is the only one at column 0, and everything stays within kilobytes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.test_formats import cells, code_spans
from tests.test_safe_formats import FILE_BOUND, SGR, UNSAFE, strings

pytestmark = pytest.mark.slow  # whole grades through the CLI

ROOT = Path(__file__).resolve().parent.parent
# Each hostile file, and what of its attack the JSON shows as data (escaped, or cut).
SHOWN = {
    "escapes_the_terminal": "\\x1b[2J\\x1b[H",
    "forges_the_closing_block": "Level: L6",
    "hides_code_with_bidi": "\\u202e",
    "links_from_the_scorecard": "](http://evil.example",
    "sends_lone_surrogates": "lone \\ud800",
    "fails_import_with_megabytes": "characters cut]",
    "crashes_with_escapes_on_stderr": "\\x1b]0;pwned\\x07",
}
TERMINALS = {
    "xterm-colour": {"TERM": "xterm-256color", "FORCE_COLOR": "1"},
    "dumb-pipe": {"TERM": "dumb"},
}
FILES = ["--json", "r.json", "--markdown", "card.md", "--junit", "junit.xml"]
# What rich's live progress writes in a terminal, besides colour codes: the cursor hidden and
# shown again, its line redrawn, and erased at the end. The kata's own; anything else is a control left unescaped.
PROGRESS = re.compile(r"\x1b\[\?25[lh]|\r(?:\x1b\[1A)?\x1b\[2K")


def kata_grade(folder: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`kata grade kv_cache.py --item attend-shape ARGS` run in `folder`, its output as bytes."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR")}
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "grade",
            "kv_cache.py",
            "--item",
            "attend-shape",
            *args,
        ],
        cwd=folder,
        capture_output=True,
        env=dict(environ, COLUMNS="80", **env),
        timeout=300,
    )


def assert_terminal_safe(stdout: bytes, closing: str = "Partial run: ") -> None:
    """Valid UTF-8; no control character but rich's colour codes and progress; one rule and one
    closing line at column 0, the kata's, and no forged one there."""
    plain = PROGRESS.sub("", SGR.sub("", stdout.decode("utf-8")))
    assert not UNSAFE.search(plain), repr(UNSAFE.search(plain))
    lines = plain.splitlines()
    assert sum(line.startswith(closing) for line in lines) == 1, plain
    assert sum(line.startswith(("─", "-" * 8)) for line in lines) == 1, plain
    assert not any(line.startswith(("Level:", "Next: nothing")) for line in lines), plain


def assert_files_safe(folder: Path) -> None:
    """r.json and junit.xml parse as UTF-8 and hold no control character of the candidate's; the
    scorecard has no link, image, HTML or table row of its own; each file within FILE_BOUND."""
    for name in ("r.json", "card.md", "junit.xml"):
        assert (folder / name).stat().st_size < FILE_BOUND, name
    report = json.loads((folder / "r.json").read_bytes().decode("utf-8"))
    assert not any(UNSAFE.search(s) for s in strings(report))
    root = ET.fromstring((folder / "junit.xml").read_bytes())
    assert not any(UNSAFE.search(e.text or "") for e in root.iter())
    outside, _ = code_spans((folder / "card.md").read_bytes().decode("utf-8"))
    assert "](" not in outside and "http" not in outside and not re.search(r"<(?!br>)", outside)
    rows = [line for line in outside.splitlines() if line.startswith("|")]
    assert rows and all(len(cells(row)) == 5 for row in rows), rows


@pytest.mark.parametrize("terminal", list(TERMINALS))
@pytest.mark.parametrize("attack", list(SHOWN))
def test_a_hostile_message_reaches_no_output_as_control_or_markup(
    attack, terminal, tmp_path, hostile_file
):
    hostile_file(attack)
    done = kata_grade(tmp_path, *FILES, env=TERMINALS[terminal])
    assert done.returncode == 1, done.stderr.decode()
    assert b"Traceback" not in done.stderr and done.stderr == b"", done.stderr.decode()
    assert_terminal_safe(done.stdout)
    assert len(done.stdout) < FILE_BOUND
    assert_files_safe(tmp_path)
    item = json.loads((tmp_path / "r.json").read_text())["items"][0]
    assert item["status"] == "error" and SHOWN[attack] in item["message"], item["message"]


def test_a_forged_closing_block_shows_only_indented_under_its_item_even_in_verbose(
    tmp_path, hostile_file
):
    hostile_file("forges_the_closing_block")
    done = kata_grade(tmp_path, "-v", env=TERMINALS["xterm-colour"])
    assert_terminal_safe(done.stdout)
    plain = PROGRESS.sub("", SGR.sub("", done.stdout.decode()))
    forged = [line for line in plain.splitlines() if "Score: 100/100" in line]
    assert forged and all(line.startswith("    Level: L6") for line in forged), plain


def test_a_lone_surrogate_costs_no_file_in_any_format(tmp_path, hostile_file):
    hostile_file("sends_lone_surrogates")
    done = kata_grade(
        tmp_path,
        "--format",
        "gradescope",
        "--json",
        "results.json",
        "--markdown",
        "card.md",
        "--junit",
        "junit.xml",
        env={"TERM": "dumb"},
    )
    assert done.returncode == 1 and done.stderr == b"", done.stderr.decode()
    results = json.loads((tmp_path / "results.json").read_bytes().decode("utf-8"))
    assert "\\ud800" in results["tests"][0]["output"]
    ET.parse(tmp_path / "junit.xml")
    assert "\\ud800" in (tmp_path / "card.md").read_bytes().decode("utf-8")
