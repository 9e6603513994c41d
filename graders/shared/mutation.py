"""Wrong implementations made from the reference solution by one small, named change.

A mutant is a reference (`solutions/kv_cache.py`, or `solutions/paged_kv_cache.py` for the
serving track) with its comments and docstrings removed (`strip_prose`) and a few edits: exact
replacements of code text, statements replaced where the syntax tree holds them, or whole
top-level functions swapped for another definition. The result is a complete, realistic
candidate file with exactly one mistake, and the edits read like the diff an interviewer would
point at. Edits find their place in the code alone, so rewording or deleting any comment or
docstring of the solutions changes no mutant. An edit that is not found exactly once raises
`MutationError`, so a change to the reference's code can never silently turn a mutant into a
copy of the reference.

Text edits keep the reference's layout but break when it is reformatted; statement edits (the
bundled mistakes' own, `graders.dense.mistakes`) are matched as syntax, so they apply to the reference
however it is laid out (parentheses, quotes, line breaks, comments), and their mutant is written
by `ast.unparse`.
"""

from __future__ import annotations

import ast
import io
import textwrap
import threading
import tokenize
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from graders.shared import bundled

SOLUTIONS = bundled.SOLUTIONS
REFERENCE = SOLUTIONS / "kv_cache.py"
PAGED_REFERENCE = SOLUTIONS / "paged_kv_cache.py"
# What REFERENCE and PAGED_REFERENCE are at import, the bases mutants are built with.
_BUNDLED = {REFERENCE: "REFERENCE", PAGED_REFERENCE: "PAGED_REFERENCE"}

# CPython 3.11's ast.parse can fail ("AST constructor recursion depth mismatch") when threads
# parse at once, as tests grading implementations in parallel do: every ast.parse of the judge's
# holds this lock (here and graders.dense.disguise).
PARSE_LOCK = threading.Lock()


class MutationError(Exception):
    """A mutant's edit does not apply to the reference as it is now."""


@dataclass(frozen=True)
class Mutant:
    """`replace`: (old, new) text pairs, each `old` code found exactly once in the reference
    without prose. `statements`: (old, new) pairs of Python statements, each run of statements
    `old` found exactly once in a body of the reference's syntax tree, layout aside, and
    replaced by `new` (none: removed). `functions`: name -> source of a top-level def that
    replaces the reference's (or is added when it has none). Applied in that order."""

    name: str
    description: str
    replace: tuple[tuple[str, str], ...] = ()
    statements: tuple[tuple[str, str], ...] = ()
    functions: dict[str, str] = field(default_factory=dict)
    base: Path = REFERENCE  # PAGED_REFERENCE for the serving track

    def source(self) -> str:
        """The base without comments and docstrings, with the edits applied. A base that is
        REFERENCE or PAGED_REFERENCE is read wherever that constant of this module points now."""
        text = strip_prose(_current(self.base).read_text())
        for old, new in self.replace:
            found = text.count(old)
            if found != 1:
                raise MutationError(
                    f"{self.name}: {old!r} occurs {found} times in the reference "
                    "(its comments and docstrings removed)"
                )
            text = text.replace(old, new)
        if self.statements:
            text = _edit_statements(text, self.statements, self.name)
        for name, definition in self.functions.items():
            text = _swap_function(text, name, definition, self.name)
        return text


def _current(base: Path) -> Path:
    """Where `base` is now: a bundled reference follows its module constant when it is moved."""
    return globals()[_BUNDLED[base]] if base in _BUNDLED else base


@lru_cache(maxsize=8)  # every mutant of a reference strips the same text: 40 ms each, once
def strip_prose(text: str) -> str:
    """Python source `text` without its comments and docstrings, the rest as written.

    A comment goes with the spaces before it. A docstring is the string-constant statement that
    opens the module, a class or a function; one that is its body's only statement becomes
    `pass`. A line that a removal leaves blank goes too; every other line, blank or not, stays
    exactly as it was, in order. The code's tokens are unchanged, so the result runs the same.
    """
    lines = io.StringIO(text).readlines()
    for (row, col), (end_row, end_col), new in sorted(_prose(lines), reverse=True):
        kept = (lines[row - 1][:col] + new).rstrip()
        lines[row - 1] = kept + lines[end_row - 1][end_col:] if kept else ""
        lines[row:end_row] = [""] * (end_row - row)
    return "".join(lines)


Position = tuple[int, int]  # (row from 1, column in characters), as tokenize gives them


def _prose(lines: list[str]) -> list[tuple[Position, Position, str]]:
    """(start, end, replacement) of every comment and docstring of the source `lines`."""
    comments = [
        (t.start, t.end, "")
        for t in tokenize.generate_tokens(iter(lines).__next__)
        if t.type == tokenize.COMMENT
    ]
    return comments + _docstrings(lines)


def _docstrings(lines: list[str]) -> list[tuple[Position, Position, str]]:
    """(start, end, replacement) of each docstring: "pass" for a class's or function's only one."""
    with PARSE_LOCK:
        tree = ast.parse("".join(lines))
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and ast.get_docstring(node, clean=False) is not None
        ):
            doc = node.body[0]
            alone = len(node.body) == 1 and not isinstance(node, ast.Module)
            found.append(
                (
                    (doc.lineno, _chars(lines[doc.lineno - 1], doc.col_offset)),
                    (doc.end_lineno, _chars(lines[doc.end_lineno - 1], doc.end_col_offset)),
                    "pass" if alone else "",
                )
            )
    return found


def _chars(line: str, utf8_offset: int) -> int:
    """The column in characters of `ast`'s column in UTF-8 bytes."""
    return len(line.encode()[:utf8_offset].decode())


def _swap_function(text: str, name: str, definition: str, mutant: str) -> str:
    with PARSE_LOCK:
        tree = ast.parse(text)
    defs = [
        n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
    ]
    if len(defs) > 1:
        raise MutationError(f"{mutant}: `{name}` is defined {len(defs)} times in the reference")
    if not defs:
        return text.rstrip("\n") + "\n\n\n" + definition.strip("\n") + "\n"
    node = defs[0]
    lines = text.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    return (
        "".join(lines[:start]) + definition.strip("\n") + "\n" + "".join(lines[node.end_lineno :])
    )


def _edit_statements(text: str, edits: tuple[tuple[str, str], ...], mutant: str) -> str:
    """`text` with each (old, new) statement edit made on its syntax tree, unparsed."""
    with PARSE_LOCK:
        tree = ast.parse(text)
        parsed = [
            (ast.parse(textwrap.dedent(old)).body, ast.parse(textwrap.dedent(new)).body)
            for old, new in edits
        ]
    for (old, new), (written, _) in zip(parsed, edits):
        wanted = [ast.dump(statement) for statement in old]
        found = [
            (body, start)
            for body in _bodies(tree)
            for start in range(len(body) - len(old) + 1)
            if [ast.dump(s) for s in body[start : start + len(old)]] == wanted
        ]
        if len(found) != 1:
            raise MutationError(
                f"{mutant}: the statements {written!r} occur {len(found)} times "
                "in the reference's code"
            )
        body, start = found[0]
        body[start : start + len(old)] = new
        if not body:
            body.append(ast.Pass())
    return ast.unparse(tree) + "\n"


def _bodies(tree: ast.AST) -> list[list[ast.stmt]]:
    """Every list of statements in `tree`: the module's, each block's, each `else` and
    `finally`."""
    return [
        body
        for node in ast.walk(tree)
        for name in ("body", "orelse", "finalbody")
        if isinstance(body := getattr(node, name, None), list)
        and body
        and isinstance(body[0], ast.stmt)
    ]
