"""Text that came from the candidate, made safe for each place the kata shows it.

Everything a candidate's code sends back is data (contract section 5): exception messages, what
it printed, file and folder names. Such text may hold terminal escapes, bidi overrides (Trojan
Source), lone surrogates, Markdown links, spreadsheet formulas or megabytes. Each function here
makes it safe for one kind of output; every format calls them on every message it shows (the
kata's own text passes through unchanged, so a format need not know which part of a message is
whose).

- `clip`: at most MAX_QUOTE characters, saying how much was cut.
- `quote`: a message as the terminal and every file show it: printable, CRLF read as a newline,
  at most MAX_QUOTE characters escapes included, in time that does not grow with the message.
- `printable`: control characters (C0 but tab and newline, DEL, C1), Unicode format characters
  (bidi controls, zero-width characters, tags), line and paragraph separators and lone
  surrogates shown as visible escapes (``\\x1b``, ``\\u202e``), never emitted.
- `markdown_code`: one line as a Markdown code span: no link, image, HTML or table cell of its own.
- `csv_cell`: a spreadsheet cell that never starts a formula.
- `xml_text`: only characters XML 1.0 allows (and valid UTF-8).
- `html_text`: text in an HTML page, in an element or a quoted attribute: no markup of its own.
- `file_name`: a file or folder name (undecodable bytes included) as printable text.
"""

from __future__ import annotations

import os
import re

MAX_QUOTE = 2000  # characters of one quoted message, in every output

# Characters of Unicode categories Cc (controls), Cf (format: bidi, zero-width, tags), Cs (lone
# surrogates), Zl and Zp (line and paragraph separators), and the noncharacters XML forbids,
# except tab and newline. tests/test_untrusted.py checks the class against unicodedata.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2"
    "\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\ufffe\uffff\ud800-\udfff"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)
_PIPE = re.compile(r"(\\*)\|")  # a pipe and the backslashes before it
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_XML_ILLEGAL = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def clip(text: str, limit: int = MAX_QUOTE) -> str:
    """`text` cut to at most `limit` characters, its end saying how many were cut."""
    if len(text) <= limit:
        return text
    note = f" [... {len(text) - limit:,} more characters cut]"
    return text[: max(0, limit - len(note))] + note


def quote(text: str, limit: int = MAX_QUOTE) -> str:
    """`text` as `printable` shows it, a CRLF read as one newline, cut to at most `limit`
    characters (escapes counted as shown) with an end that says how many of `text`'s characters
    were cut. Only the first `limit` characters are escaped: a message of megabytes costs what
    one of `limit` characters does."""
    head = text[:limit]
    shown = printable(head.replace("\r\n", "\n"))
    if len(text) <= limit and len(shown) <= limit:
        return shown
    pieces = [
        "" if char == "\r" and head[n + 1 : n + 2] == "\n" else printable(char)
        for n, char in enumerate(head)
    ]
    budget = limit - len(f" [... {len(text):,} more characters cut]")
    kept = used = 0
    while kept < len(pieces) and used + len(pieces[kept]) <= budget:
        used += len(pieces[kept])
        kept += 1
    return "".join(pieces[:kept]) + f" [... {len(text) - kept:,} more characters cut]"


def printable(text: str) -> str:
    """`text` with every unsafe character shown as an escape: a byte that could not be decoded
    (a surrogate escape, U+DC80..U+DCFF) as ``\\xNN``, other characters below U+0100 as
    ``\\xNN``, the rest as ``\\uNNNN`` or ``\\UNNNNNNNN``. Tab and newline are kept."""
    return _UNSAFE.sub(_escape, text)


def markdown_code(text: str) -> str:
    """`text` (printable, on one line: newlines become " / ") as a Markdown code span that is
    safe in a table cell: inside it nothing is a link, an image, HTML or emphasis, and a `|`
    is escaped so that it cannot start a cell (GFM splits a row before it reads code spans, and
    reads `\\` as an escaped backslash: a pipe after an odd run of backslashes gets one more
    backslash, which shows)."""
    line = printable(text).replace("\n", " / ")  # printable escapes a CR already
    line = _PIPE.sub(lambda m: m.group(1) + "\\" * (len(m.group(1)) % 2) + "\\|", line)
    if not line.strip():
        return ""
    fence = "`" * (_longest_run(line, "`") + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    return f"{fence}{pad}{line}{pad}{fence}"


def csv_cell(text: str) -> str:
    """`text` (printable) as a spreadsheet cell that is never read as a formula: one that would
    start with =, +, -, @, tab or CR is led by a single quote (OWASP's advice)."""
    cell = printable(text)
    return "'" + cell if cell.startswith(_FORMULA_START) else cell


def xml_text(text: str) -> str:
    """`text` (printable) holding only characters XML 1.0 allows; escaping <, > and & is left to
    the XML writer."""
    return _XML_ILLEGAL.sub("\ufffd", printable(text))


def html_text(text: str) -> str:
    """`text` (printable, XML-legal) with &, <, >, " and ' as character references: in an
    element's content or a quoted attribute value it is text alone, never a tag, an attribute,
    an entity or the end of a raw-text element (</script>, </style>)."""
    return (
        xml_text(text)
        .replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("'", "&#39;")
    )


def file_name(name: str | bytes | os.PathLike) -> str:
    """A file or folder name as printable text: bytes that are not UTF-8 shown as ``\\xNN``."""
    if isinstance(name, bytes):
        name = name.decode("utf-8", "surrogateescape")
    return printable(os.fspath(name))


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _longest_run(text: str, char: str) -> int:
    return max((len(run) for run in re.findall(f"{re.escape(char)}+", text)), default=0)
