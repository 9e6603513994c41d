"""graders.shared.untrusted's formats, their exact output at each edge: a Markdown code span's
fence and padding, HTML's five character references, and each escape's form at the edges of
its range of code points."""

from __future__ import annotations

import unicodedata

import pytest

from graders.shared.untrusted import html_text, markdown_code, printable


@pytest.mark.parametrize(
    "raw, span",
    [
        ("plain", "`plain`"),  # no backtick inside: a fence of one
        ("a`b", "``a`b``"),  # one longer than the longest run inside
        ("a``b`c", "```a``b`c```"),
        ("`a", "`` `a ``"),  # a backtick at an end is padded off the fence
        ("a`", "`` a` ``"),
        ("`", "`` ` ``"),
        ("a\nb", "`a / b`"),  # one line
        ("a\rb", "`a\\x0db`"),  # a CR shown as its escape, like any control
    ],
    ids=["plain", "inner", "runs", "leading", "trailing", "only", "newline", "cr"],
)
def test_markdown_code_is_the_shortest_fence_padded_only_where_a_backtick_ends_it(raw, span):
    assert markdown_code(raw) == span


@pytest.mark.parametrize("raw", ["", "   ", "\t"])
def test_markdown_code_of_blank_text_is_the_empty_string(raw):
    assert markdown_code(raw) == ""


def test_markdown_code_holds_no_control_character():
    span = markdown_code("a\x1bb\rc\x00d")
    assert not any(unicodedata.category(c) == "Cc" for c in span), span


def test_html_text_writes_the_five_references_and_nothing_else_changes():
    assert html_text("<a href=\"x\" title='y'>&amp;</a>") == (
        "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;"
    )
    assert html_text("naïve ✓ 1 < 2") == "naïve ✓ 1 &lt; 2"
    assert html_text("\x1b") == "\\x1b"  # printable first


@pytest.mark.parametrize(
    "code, shown",
    [
        (0xDC7F, "\\udc7f"),  # a lone surrogate below surrogateescape's bytes
        (0xDC80, "\\x80"),  # surrogateescape's first byte
        (0xDCFF, "\\xff"),  # its last
        (0xDD00, "\\udd00"),  # past it: a lone surrogate again
        (0x00, "\\x00"),
        (0x9F, "\\x9f"),
        (0xAD, "\\xad"),  # below U+0100: \xNN
        (0x0600, "\\u0600"),
        (0xFFFF, "\\uffff"),  # up to U+FFFF: \uNNNN
        (0x110BD, "\\U000110bd"),
        (0xE007F, "\\U000e007f"),  # past it: \UNNNNNNNN
    ],
)
def test_each_escape_has_the_form_of_its_range(code, shown):
    assert printable(chr(code)) == shown
