"""`quote` and `clip` hold their bound whatever the text (graders.shared.untrusted).

The promise: every quote is at most its limit (MAX_QUOTE, 2,000 characters, by default), escapes
counted as shown, whatever precedes the cut; what it shows is the start of the text as
`printable` shows it (a CRLF read as one newline), no escape cut in half, as much of it as the
limit leaves room for, and its end says how many of the text's characters were cut. The
reference here is written from that promise, character by character, not from quote's code.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from graders.shared import untrusted
from graders.shared.untrusted import MAX_QUOTE, clip, printable, quote

WIDEST = 10  # the widest escape a character is shown as: \U000e0041
NOTE = re.compile(r" \[\.\.\. ([\d,]+) more characters cut\]\Z")


def shown_as(text: str) -> list[str]:
    """Each character of `text` as a quote shows it: the CR of a CRLF as nothing."""
    return [
        "" if char == "\r" and text[n + 1 : n + 2] == "\n" else printable(char)
        for n, char in enumerate(text)
    ]


def check(text: str, limit: int) -> None:
    out = quote(text, limit)
    assert len(out) <= limit
    whole = "".join(shown_as(text))
    if out == whole:
        assert len(text) <= limit, "a text of more than `limit` characters is cut, and says so"
        return
    note = NOTE.search(out)
    assert note, "a cut says so"
    cut = int(note.group(1).replace(",", ""))
    kept = len(text) - cut
    assert 0 <= kept <= limit and kept < len(text)
    body = out[: note.start()]
    assert body == "".join(shown_as(text)[:kept]), "the start of the text, no escape cut in half"
    if kept < limit:  # as much as fits: the next character's escape would not have fitted
        # beside a note as long as one of len(text) characters (quote makes room for that one)
        room = limit - len(f" [... {len(text):,} more characters cut]")
        assert len(body) + len(shown_as(text)[kept]) > room
        assert len(body) > room - WIDEST


# Characters whose shown width differs: escapes of 4, 6 and 10 characters, a CRLF shown as one,
# a lone CR, a byte that was not UTF-8.
PIECES = st.sampled_from(
    ["x", "\x1b", "\u202e", "\U000e0041", "\r\n", "\r", "\n", "é", "\ud800", "\udcff", "\t"]
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    pieces=st.lists(PIECES, max_size=300).map("".join),
    run=st.integers(0, 3 * MAX_QUOTE),
    after=st.lists(PIECES, max_size=40).map("".join),
    limit=st.sampled_from([MAX_QUOTE, 100, 41, 40]),
)
@example(pieces="\U000e0041", run=3000, after="", limit=MAX_QUOTE)  # once 2,009 (issue 46)
@example(pieces="", run=3000, after="", limit=MAX_QUOTE)
def test_every_quote_is_at_most_its_limit_and_the_longest_start_that_fits(
    pieces, run, after, limit
):
    check(pieces + "x" * run + after, limit)


@pytest.mark.parametrize(
    "text",
    [
        "x" * MAX_QUOTE,
        "\x1b" * (MAX_QUOTE // 4),
        "\x1b" * (MAX_QUOTE // 4) + "y",
        "\U000e0041" + "x" * 3000,
        "x" * 1990 + "\U000e0041" * 5,
        "a\r\nb" * 1000,
        "\r\n" * 5000,
        "\r" * 3000,
        "x" * (MAX_QUOTE - 1) + "\r\n",
        "\r\n" * 1000 + "x",
    ],
    ids=[
        "exactly-the-limit",
        "escapes-exactly-the-limit",
        "escapes-one-past",
        "tag-then-x",
        "tags-at-the-cut",
        "crlfs",
        "only-crlfs",
        "only-crs",
        "crlf-across-the-limit",
        "crlfs-one-past",
    ],
)
def test_quote_at_its_edges(text):
    check(text, MAX_QUOTE)


def test_a_text_of_exactly_the_limit_is_shown_whole():
    assert quote("x" * 40, 40) == "x" * 40
    assert quote("\x1b" * 10, 40) == "\\x1b" * 10  # escapes shown exactly at the limit


def test_a_crlf_past_the_start_is_one_newline_in_a_cut_quote_too():
    out = quote("ab\r\n" * 100, 50)
    assert out.startswith("ab\nab\nab\n") and "\\x0d" not in out
    assert quote("a\rb" * 100, 50).startswith("a\\x0db")  # a lone CR is escaped


def test_a_text_shown_in_less_than_the_limit_is_cut_after_its_last_character():
    out = quote("\r\n" * 5000)
    assert out == "\n" * 1000 + " [... 8,000 more characters cut]"


def test_only_the_first_limit_characters_are_escaped(monkeypatch):
    """A message of megabytes costs what one of `limit` characters does."""
    seen = []

    def watched(text):
        seen.append(len(text))
        return printable(text)

    monkeypatch.setattr(untrusted, "printable", watched)
    assert quote("\x1b" + "x" * 1_000_000).startswith("\\x1bxxx")
    assert seen and max(seen) <= MAX_QUOTE


@pytest.mark.parametrize("length", [0, 1, 39, 40, 41, 100, 10_000])
def test_clip_is_at_most_its_limit_and_says_how_much_was_cut(length):
    text = "y" * length
    out = clip(text, 40)
    if length <= 40:
        assert out == text
    else:
        assert len(out) == 40 and out.startswith("y")
        assert out.endswith(f" [... {length - 40:,} more characters cut]")
        assert out.count("y") == 40 - len(f" [... {length - 40:,} more characters cut]")


def test_a_clip_limit_shorter_than_its_note_keeps_none_of_the_text():
    assert clip("y" * 100, 10) == " [... 90 more characters cut]"
