"""Wrong implementations made from the reference solution by one small, named change.

A mutant is a reference (`solutions/kv_cache.py`, or `solutions/paged_kv_cache.py` for the
serving track) with a few edits: exact text replacements, or
whole top-level functions swapped for another definition. The result is a complete, realistic
candidate file with exactly one mistake, and the edits read like the diff an interviewer would
point at. An edit whose text is not found exactly once raises `MutationError`, so a change to the
reference can never silently turn a mutant into a copy of the reference.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field
from pathlib import Path

from graders import bundled

SOLUTIONS = bundled.SOLUTIONS
REFERENCE = SOLUTIONS / "kv_cache.py"
PAGED_REFERENCE = SOLUTIONS / "paged_kv_cache.py"


class MutationError(Exception):
    """A mutant's edit does not apply to the reference as it is now."""


@dataclass(frozen=True)
class Mutant:
    """`replace`: (old, new) text pairs, each `old` found exactly once. `functions`: name ->
    source of a top-level def that replaces the reference's (or is added when it has none)."""

    name: str
    description: str
    replace: tuple[tuple[str, str], ...] = ()
    functions: dict[str, str] = field(default_factory=dict)
    base: Path = REFERENCE  # PAGED_REFERENCE for the serving track

    def source(self) -> str:
        text = self.base.read_text()
        for old, new in self.replace:
            found = text.count(old)
            if found != 1:
                raise MutationError(f"{self.name}: {old!r} occurs {found} times in the reference")
            text = text.replace(old, new)
        for name, definition in self.functions.items():
            text = _swap_function(text, name, definition, self.name)
        return text


# CPython 3.11's ast.parse can fail ("AST constructor recursion depth mismatch") when threads
# parse at once, as tests grading implementations in parallel do.
_PARSE = threading.Lock()


def _swap_function(text: str, name: str, definition: str, mutant: str) -> str:
    with _PARSE:
        tree = ast.parse(text)
    defs = [n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
    if len(defs) > 1:
        raise MutationError(f"{mutant}: `{name}` is defined {len(defs)} times in the reference")
    if not defs:
        return text.rstrip("\n") + "\n\n\n" + definition.strip("\n") + "\n"
    node = defs[0]
    lines = text.splitlines(keepends=True)
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    return "".join(lines[:start]) + definition.strip("\n") + "\n" + "".join(lines[node.end_lineno:])
