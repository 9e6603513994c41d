"""Candidate text is data in every output (contract section 5): the terminal report at every
detail (and kvkata's notebook display, which prints the same report), the JSON, the scorecard,
JUnit and Gradescope, each given a grade whose every message carries every attack found so far
(terminal escapes, bidi controls, a lone surrogate, XML-illegal characters, a forged closing
block, Markdown links, images, HTML and pipes) and megabytes of it. Each output must show the
text escaped, bounded, and set apart from the kata's own lines; every file must parse.
"""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from graders.formats import outputs
from graders.formats.gradescope import write_gradescope
from graders.formats.junit import write_junit
from graders.formats.report import render, write_json
from graders.formats.scorecard import write_markdown
from graders.judge.grade import BEFORE_PLUS
from graders.judge.result import GradeResult, ItemResult, TellResult
from graders.shared.rubric import PLUS, load
from graders.shared.tracks import DENSE
from graders.shared.untrusted import MAX_QUOTE
from tests.test_formats import cells, code_spans

FORGED_CLOSING = "\nLevel: L6    Score: 100/100    isolation: bwrap\nNext: nothing, you passed\n"
ATTACKS = {
    "clear-screen": "\x1b[2J\x1b[H",
    "cursor-up": "\x1b[5A\x1b[2K",
    "window-title": "\x1b]0;pwned\x07",
    "hyperlink": "\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\",
    "c1-csi": "\x9b31mred\x9b0m",
    "bidi": "access = \u202e\u2066 admin \u2069\u2066",
    "carriage-return": "hidden\roverwritten",
    "lone-surrogate": "lone \ud800 and \udcff",
    "xml-illegal": "nul \x00 vt \x0b noncharacter \ufffe \uffff",
    "forged-closing": FORGED_CLOSING,
    "markdown-link": "[click](http://evil.example/x)",
    "markdown-image": "![x](http://evil.example/pixel.png)",
    "html": "<img src=x onerror=alert(1)><script>alert(2)</script>",
    "pipes": "| a | b |\n| --- | --- |",
    "backticks": "``` and ` and ````",
}
HOSTILE = "raised RuntimeError: " + " ".join(ATTACKS.values())
FOUR_MB = 4 << 20
# A message escaped can be longer than MAX_QUOTE before it is cut: a bound on a whole file is
# its items' quoted messages plus what the kata writes around them.
FILE_BOUND = 200_000

# Colour and style codes rich writes in a terminal: the only escape sequences allowed.
SGR = re.compile(r"\x1b\[[0-9;]*m")
UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069"
    "\ufeff\ufffe\uffff\ud800-\udfff]"
)


def hostile(message: str = HOSTILE, unavailable: str | None = None) -> GradeResult:
    """A full dense grade: every item fails with `message` (not run, with `unavailable` as
    the worker's reason, when given), and every tell is detected with `message`."""
    rubric = load()
    items = [
        ItemResult(
            i.id,
            i.level,
            "error",
            0.0,
            i.points,
            "not run: the file does not import" if unavailable else message,
            unavailable,
        )
        if i.level != PLUS
        else ItemResult(i.id, i.level, "not_attempted", 0.0, i.points, BEFORE_PLUS)
        for i in rubric.track(DENSE)
    ]  # L6+: not started, as the judge leaves it
    tells = [TellResult(t.id, True, message) for t in rubric.tells]
    return GradeResult("candidates/kv_cache.py", "below L4", items, tells, False, isolation="bwrap")


def terminal(result: GradeResult, detail: str, is_terminal: bool = True) -> str:
    """What the report at `detail` writes to an 80-column stream, colour codes included in a
    terminal."""
    stream = io.StringIO()
    console = Console(
        width=80,
        file=stream,
        force_terminal=is_terminal,
        color_system="standard" if is_terminal else None,
        highlight=False,
    )
    render(result, console, detail, "kata grade candidates/kv_cache.py")
    return stream.getvalue()


def assert_terminal_safe(written: str) -> None:
    """No control character but rich's own colour codes, and one closing block: only the kata's
    lines start at column 0, so the forged "Level:" and "Next:" lines are indented."""
    plain = SGR.sub("", written)
    assert not UNSAFE.search(plain), repr(UNSAFE.search(plain))
    lines = plain.splitlines()
    assert sum(line.startswith("Level: ") for line in lines) == 1, plain
    assert sum(line.startswith("Next: ") for line in lines) <= 1, plain
    assert not any(line.startswith(("Level: L6", "Next: nothing")) for line in lines), plain


@pytest.mark.parametrize("is_terminal", [True, False], ids=["terminal", "pipe"])
@pytest.mark.parametrize("detail", ["default", "verbose", "quiet", "brief"])
def test_the_report_escapes_every_attack_and_keeps_its_closing_block_its_own(detail, is_terminal):
    written = terminal(hostile(), detail, is_terminal)
    assert_terminal_safe(written)
    plain = SGR.sub("", written)
    if detail != "quiet":
        assert "\\x1b[2J" in plain and "\\u202e" in plain and "\\ud800" in plain, plain
    closing = [line for line in plain.splitlines() if line.startswith("Level: ")]
    assert closing == ["Level: below L4    Score: 0/100    isolation: bwrap"]


@pytest.mark.parametrize("detail", ["default", "verbose", "quiet", "brief"])
def test_a_forged_closing_line_only_shows_indented_under_its_item(detail):
    """Indented under its item or tell (in -v's panel of tells, inside its border too)."""
    plain = SGR.sub("", terminal(hostile(), detail))
    forged = [line for line in plain.splitlines() if "Level: L6" in line]
    assert all(re.match(r"│? {4}", line) for line in forged), forged
    if detail in ("default", "verbose"):
        assert forged, "the message is shown, indented"


def test_why_items_were_not_run_is_indented_under_its_line_and_escaped():
    plain = SGR.sub("", terminal(hostile(unavailable=HOSTILE), "quiet"))
    assert_terminal_safe(plain)
    lines = plain.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("Items not run"))
    reason = lines[start + 1 : next(n for n, line in enumerate(lines) if line.startswith("Next:"))]
    assert reason and all(line.startswith("    ") for line in reason), lines


@pytest.mark.parametrize("detail", ["default", "verbose", "quiet", "brief"])
def test_megabytes_of_message_make_a_report_of_kilobytes(detail):
    huge = HOSTILE + "x" * FOUR_MB
    written = terminal(hostile(huge), detail) + terminal(hostile(unavailable=huge), detail)
    assert len(written.encode()) < FILE_BOUND
    assert "more characters cut]" in written


def test_the_notebook_display_is_the_same_safe_report():
    from kvkata import Grade

    shown = Grade(hostile(), "kata grade kv_cache.py")
    bundle = shown._repr_mimebundle_()
    for text in (str(shown), bundle["text/plain"]):
        assert_terminal_safe(text)
    assert not UNSAFE.search(bundle["text/html"])
    assert "<img" not in bundle["text/html"] and "<script" not in bundle["text/html"]
    rich_console = Console(width=80, file=io.StringIO(), force_terminal=True)
    rich_console.print(shown)
    assert_terminal_safe(rich_console.file.getvalue())


# --- the scorecard ------------------------------------------------------------------------------


def scorecard(result: GradeResult, tmp_path: Path) -> str:
    path = tmp_path / "scorecard.md"
    write_markdown(result, path)
    return path.read_bytes().decode("utf-8")  # strict: valid UTF-8


@pytest.mark.parametrize("unavailable", [None, HOSTILE], ids=["failing", "not-importing"])
def test_the_scorecard_has_no_link_image_html_or_row_of_the_candidates(tmp_path, unavailable):
    text = scorecard(hostile(unavailable=unavailable), tmp_path)
    assert not UNSAFE.search(text)
    outside, spans = code_spans(text)
    assert any("](http://evil.example" in span for span in spans), "the attack is shown, as code"
    assert "](" not in outside and "![" not in outside and "http" not in outside, outside
    assert not re.search(r"<(?!br>)", outside), "no HTML but the kata's <br>"
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows and all(len(cells(row)) == 5 for row in rows), rows
    assert len(text.encode()) < FILE_BOUND


def test_a_huge_message_makes_a_scorecard_of_kilobytes(tmp_path):
    huge = HOSTILE + "x" * FOUR_MB
    for result in (hostile(huge), hostile(unavailable=huge)):
        text = scorecard(result, tmp_path)
        assert len(text.encode()) < FILE_BOUND
        outside, _ = code_spans(text)
        assert "http" not in outside


# --- JSON, Gradescope, JUnit --------------------------------------------------------------------


def strings(value) -> list[str]:
    """Every string in a parsed JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


@pytest.mark.parametrize("write", [write_json, write_gradescope], ids=["json", "gradescope"])
@pytest.mark.parametrize("size", [0, FOUR_MB], ids=["attacks", "4MB"])
@pytest.mark.parametrize("unavailable", [False, True], ids=["failing", "not-importing"])
def test_json_files_are_valid_utf8_printable_and_bounded(tmp_path, write, size, unavailable):
    message = HOSTILE + "x" * size
    path = tmp_path / "out.json"
    write(hostile(unavailable=message) if unavailable else hostile(message), path)
    data = path.read_bytes()
    assert len(data) < FILE_BOUND
    parsed = json.loads(data.decode("utf-8"))
    assert not any(UNSAFE.search(s) for s in strings(parsed))
    # Gradescope: the kata's line naming the item's cause (ids only), then the message
    outputs = [
        t["output"].partition("\n\n")
        if t["output"].startswith("Cause: ")
        else ("", "", t["output"])
        for t in parsed.get("tests", ())
    ]
    assert all(len(cause) < 1000 for cause, _, _ in outputs)
    messages = (
        [i["message"] for i in parsed["items"]]
        if write is write_json
        else [rest.split("\n\nHint: ")[0] for _, _, rest in outputs]
    )
    assert all(len(m) <= MAX_QUOTE + len("not run: ") for m in messages)
    assert any("\\x1b[2J" in m for m in messages)


@pytest.mark.parametrize("size", [0, FOUR_MB], ids=["attacks", "4MB"])
@pytest.mark.parametrize("unavailable", [False, True], ids=["failing", "not-importing"])
def test_junit_is_valid_utf8_xml_and_bounded(tmp_path, size, unavailable):
    message = HOSTILE + "x" * size
    path = tmp_path / "junit.xml"
    write_junit(hostile(unavailable=message) if unavailable else hostile(message), path)
    data = path.read_bytes()
    data.decode("utf-8")
    assert len(data) < FILE_BOUND
    root = ET.fromstring(data)
    texts = [e.text or "" for e in root.iter("error")]
    assert len(texts) == len([i for i in load().track(DENSE) if i.level != PLUS])  # L6+ not started
    assert all(len(t) <= MAX_QUOTE + len("not run: ") and not UNSAFE.search(t) for t in texts)
    assert all("\n" not in e.get("message") for e in root.iter("error"))


# --- every file asked for is written, whatever happens to one -----------------------------------


def asked(tmp_path: Path) -> dict:
    return dict(
        json_path=tmp_path / "r.json",
        output_format="kata",
        markdown=tmp_path / "card.md",
        junit=tmp_path / "junit.xml",
    )


def test_a_format_that_breaks_costs_its_own_file_alone_and_is_the_katas_bug(tmp_path, monkeypatch):
    def broken(result, path):
        raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")

    monkeypatch.setattr("graders.formats.scorecard.write_markdown", broken)
    failures = outputs.write_outputs(hostile(), **asked(tmp_path))
    assert [(f.option, f.exit_code) for f in failures] == [("--markdown", outputs.BROKEN)]
    assert "UnicodeEncodeError" in str(failures[0]) and "\n" not in str(failures[0])
    json.loads((tmp_path / "r.json").read_text())
    ET.parse(tmp_path / "junit.xml")
    assert not (tmp_path / "card.md").exists()


def test_a_file_the_system_refuses_is_a_usage_error_and_the_others_are_written(tmp_path):
    files = dict(asked(tmp_path), json_path=tmp_path / "gone" / "r.json")
    failures = outputs.write_outputs(hostile(), **files)
    assert [(f.option, f.exit_code) for f in failures] == [("--json", outputs.USAGE_ERROR)]
    assert (tmp_path / "card.md").is_file() and (tmp_path / "junit.xml").is_file()


def test_every_format_writes_a_lone_surrogate_without_a_traceback(tmp_path):
    result = hostile("lone \ud800 surrogate")
    assert outputs.write_outputs(result, **asked(tmp_path)) == []
    gradescope = dict(
        asked(tmp_path), json_path=tmp_path / "results.json", output_format="gradescope"
    )
    assert outputs.write_outputs(result, **gradescope) == []
    for name in ("r.json", "results.json", "card.md", "junit.xml"):
        assert "\\ud800" in (tmp_path / name).read_bytes().decode("utf-8"), name
