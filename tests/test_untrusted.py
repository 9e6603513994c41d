"""graders.shared.untrusted: candidate text made safe for each output (contract section 5)."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from graders.shared.untrusted import (
    MAX_QUOTE,
    _UNSAFE,
    clip,
    csv_cell,
    file_name,
    markdown_code,
    printable,
    quote,
    xml_text,
)

NEWER_FORMAT_CHARACTERS = range(0x13439, 0x13440)  # Cf from Unicode 15 on; escaped here already


def test_every_control_format_separator_and_surrogate_is_unsafe():
    missing, extra = [], []
    for code in range(0x110000):
        char = chr(code)
        unsafe = (
            unicodedata.category(char) in {"Cc", "Cf", "Cs", "Zl", "Zp"} or code in (0xFFFE, 0xFFFF)
        ) and char not in "\t\n"
        matched = _UNSAFE.fullmatch(char) is not None
        if unsafe and not matched:
            missing.append(hex(code))
        if matched and not unsafe and code not in NEWER_FORMAT_CHARACTERS:
            extra.append(hex(code))
    assert missing == [] and extra == []


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("\x1b[2J", "\\x1b[2J"),  # clear screen
        ("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),  # window title (OSC 0)
        ("\x9b31m", "\\x9b31m"),  # C1 control sequence introducer
        ("a\u202eb\u2066c", "a\\u202eb\\u2066c"),  # bidi override and isolate
        ("line\rover", "line\\x0dover"),  # carriage return
        ("lone \ud800", "lone \\ud800"),  # a lone surrogate
        ("byte \udcff", "byte \\xff"),  # an undecodable byte (surrogateescape)
        ("tag \U000e0041", "tag \\U000e0041"),  # ASCII smuggling with tag characters
        ("tab\tand\nnewline", "tab\tand\nnewline"),  # kept
        ("naïve — ok ✓", "naïve — ok ✓"),  # ordinary text unchanged
    ],
    ids=["csi", "osc", "c1", "bidi", "cr", "surrogate", "byte", "tag", "kept", "plain"],
)
def test_printable_escapes_what_controls_a_terminal(raw, shown):
    assert printable(raw) == shown


def test_clip_bounds_and_says_how_much_was_cut():
    assert clip("short") == "short"
    cut = clip("x" * 10_000)
    assert len(cut) == MAX_QUOTE and cut.endswith("[... 8,000 more characters cut]")
    assert len(clip("y" * 100, 40)) == 40


@pytest.mark.parametrize(
    "raw",
    [
        "[click](http://evil.example/x)",
        "![img](http://evil.example/p.png)",
        "<img src=x onerror=alert(1)>",
        "a | b | c",
        "`tick` and ``two``",
        "line one\nLevel: L6    Score: 100/100",
    ],
)
def test_markdown_code_is_one_code_span_with_no_cell_break(raw):
    span = markdown_code(raw)
    fence = span[: len(span) - len(span.lstrip("`"))]
    assert span.startswith(fence) and span.endswith(fence)
    body = span[len(fence) : -len(fence)]
    assert fence not in body  # one span: nothing of it escapes the code
    assert "\n" not in span and "|" not in span.replace("\\|", "")


@pytest.mark.parametrize("backslashes", range(4))
def test_markdown_code_keeps_a_pipe_in_its_cell_after_any_run_of_backslashes(backslashes):
    """GFM splits a row at a pipe unless a backslash escapes it, and `\\\\` is an escaped
    backslash (cmark-gfm's escaped_char): the pipe must follow an odd run of backslashes."""
    span = markdown_code("a" + "\\" * backslashes + "|b")
    run = re.search(r"(\\*)\|", span).group(1)
    assert len(run) % 2 == 1, span


@pytest.mark.parametrize(
    "raw", ['=HYPERLINK("http://x")', "+cmd|' /C calc'!A0", "-2+3+cmd|x", "@SUM(A1)", "\tx", "\rx"]
)
def test_csv_cell_never_starts_a_formula(raw):
    assert csv_cell(raw)[0] not in "=+-@\t\r"


def test_quote_escapes_then_bounds_what_is_shown_and_says_what_was_cut():
    assert quote("a\r\nb\x1b[2J") == "a\nb\\x1b[2J", "a CRLF is a newline; the rest escaped"
    escapes = quote("\x1b" * 5000)
    assert len(escapes) == MAX_QUOTE and escapes.endswith(" [... 4,508 more characters cut]")
    assert set(escapes.split(" [")[0].split("\\x1b")) == {""}, "no escape cut in half"
    huge = quote("x" * 24_000_000)
    assert len(huge) == MAX_QUOTE and huge.endswith(" [... 23,998,037 more characters cut]")
    assert quote("short") == "short"


def test_xml_text_holds_only_characters_xml_allows():
    text = xml_text("a\x00b\x0bc\ud800d\ufffee\x1b")
    assert all(
        ch in "\t\n\r" or 0x20 <= ord(ch) <= 0xD7FF or 0xE000 <= ord(ch) <= 0xFFFD for ch in text
    )
    text.encode("utf-8")  # valid UTF-8


def test_file_name_shows_undecodable_bytes():
    assert file_name(b"sub\xffmission") == "sub\\xffmission"
    assert file_name("sub\x1b[2Jname") == "sub\\x1b[2Jname"


# Characters whose shown width differs: escapes of 4, 6 and 10 characters, a CRLF shown as one.
SHOWN_WIDTHS = st.sampled_from(
    ["x", "\x1b", "\u202e", "\U000e0041", "\r\n", "\r", "\n", "é", "\ud800", "\udcff"]
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    head=st.lists(SHOWN_WIDTHS, max_size=80).map("".join),
    tail=st.integers(0, 3 * MAX_QUOTE),
    limit=st.sampled_from([MAX_QUOTE, 100, 41]),
)
@example(head="\U000e0041", tail=3000, limit=MAX_QUOTE)  # once 2,009 characters (issue 46)
def test_every_quote_is_at_most_its_limit_whatever_precedes_the_cut(head, tail, limit):
    text = head + "x" * tail
    shown = quote(text, limit)
    assert len(shown) <= limit
    whole = printable(text.replace("\r\n", "\n"))
    assert shown == whole or shown.endswith(" more characters cut]"), "a cut says so"
