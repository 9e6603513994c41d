"""The attention steps as whole files: a solution whose `attend` ends in a function of benchmarks/.

Each attention step is a function, not a cache (`kata solution tiled` prints its module). As a
step of the path, it is the solution it starts from with attend's math replaced by a call to
that function, and the function defined in the file; this is what `kata solution --diff` shows,
what the bench runs (benchmarks/subjects.py) and what the learners' tests grade.

    tiled, fused   solutions/kv_cache.py: `attend` validates the query as before, then returns
                   the function on the cache's views; the function follows `attend`.
    tiled-paged,   solutions/paged_kv_cache.py: `attend` validates and builds the batch's
    fused-paged
                   padded tables and lengths as before, then returns the function on the pools;
                   the gather goes, and so do its scratch buffers unless the function takes
                   them (tiled-paged's tiles); the function follows the class.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from graders.shared import bundled


@dataclass(frozen=True)
class AttentionStep:
    start: str  # the solution step it changes
    file: Path  # the module that defines `function`
    function: str
    scratch: bool = False  # the function takes the paged cache's `_scratch`: buffers kept


STEPS = {
    "tiled": AttentionStep("preallocated", bundled.TILED_ATTENTION, "tiled_attention"),
    "fused": AttentionStep("preallocated", bundled.FUSED_ATTENTION, "fused_attention"),
    "tiled-paged": AttentionStep(
        "paged", bundled.TILED_PAGED_ATTENTION, "tiled_paged_attention", scratch=True
    ),
    "fused-paged": AttentionStep("paged", bundled.FUSED_PAGED_ATTENTION, "fused_paged_attention"),
}
DENSE_CALL = "    return {function}(query, cache.keys, cache.values, cache.lengths)\n"
PAGED_CALL = (
    "        return {function}(query, self.k_pool, self.v_pool, self.k_scale,\n"
    "{indent}self.v_scale, index, lengths{scratch})\n"
)
# The paged attend's gather, and the scratch buffers it keeps between calls: what the paged
# steps drop, the scratch only when their function does not take it.
GATHER, SCRATCH, SCRATCH_BUFFERS = "_gather", "_scratch", "_buffers"


def step_file(name: str, start_source: str) -> str:
    """The whole file of attention step `name`, from the source of the solution it starts from."""
    step = STEPS[name]
    text = step.file.read_text()
    function = top_level_function(text, step.function)
    body = text.splitlines(keepends=True)[function.lineno - 1 : function.end_lineno]
    if step.start == "paged":
        return _paged_step(start_source, step, body)
    return _dense_step(start_source, step.function, body)


def _dense_step(source: str, function: str, body: list[str]) -> str:
    attend = top_level_function(source, "attend")
    # attend's math starts at its first statement that reads the cache's views; before it, checks.
    first = next(
        statement
        for statement in attend.body
        if any(
            isinstance(node, ast.Attribute) and node.attr == "keys" for node in ast.walk(statement)
        )
    )
    lines = source.splitlines(keepends=True)
    return "".join(
        [
            *lines[: first.lineno - 1],
            DENSE_CALL.format(function=function),
            "\n\n",
            *body,
            *lines[attend.end_lineno :],
        ]
    )


def _paged_step(source: str, step: AttentionStep, body: list[str]) -> str:
    cache = next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef) and node.name == "PagedKVCache"
    )
    methods = {node.name: node for node in cache.body if isinstance(node, ast.FunctionDef)}
    attend = methods["attend"]
    # attend's math starts after the statement that makes `lengths`; before it, checks and tables.
    made = next(
        i
        for i, statement in enumerate(attend.body)
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "lengths" for t in statement.targets)
    )
    math_lines = range(attend.body[made + 1].lineno, attend.end_lineno + 1)
    methods_dropped = [GATHER] if step.scratch else [GATHER, SCRATCH]
    dropped = [
        range(_first_line(methods[name]), methods[name].end_lineno + 1) for name in methods_dropped
    ]
    if not step.scratch:
        dropped += [
            range(statement.lineno, statement.end_lineno + 1)
            for statement in methods["__init__"].body
            if _assigns(statement, SCRATCH_BUFFERS)
        ]
    lines = source.splitlines(keepends=True)
    kept = []
    for number, line in enumerate(lines, start=1):
        if number == math_lines.start:
            indent = " " * len(f"        return {step.function}(")
            kept.append(
                PAGED_CALL.format(
                    function=step.function,
                    indent=indent,
                    scratch=", self._scratch" if step.scratch else "",
                )
            )
        if number in math_lines or any(number in gone for gone in dropped):
            continue
        kept.append(line)
        if number == cache.end_lineno:
            kept += ["\n\n", *body]
    return "".join(kept)


def _assigns(statement: ast.stmt, attribute: str) -> bool:
    """Whether `statement` assigns self.<attribute>, annotated or not."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    else:
        targets = [getattr(statement, "target", None)]  # an annotated assignment's one target
    return any(isinstance(t, ast.Attribute) and t.attr == attribute for t in targets)


def _first_line(function: ast.FunctionDef) -> int:
    """Where a method starts, its decorators and the blank line before it included."""
    return min([function.lineno, *(d.lineno for d in function.decorator_list)]) - 1


def top_level_function(source: str, name: str) -> ast.FunctionDef:
    """The ast.FunctionDef of the top-level function `name` of `source`."""
    return next(
        node
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef) and node.name == name
    )
