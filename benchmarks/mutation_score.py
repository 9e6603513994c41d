"""Mutation score of the judge: how many single-edit mutants each module's own quick tests kill.

    python -m benchmarks.mutation_score                   # every module of mutation_score.toml
    python -m benchmarks.mutation_score --module replies  # one (repeat --module for more)
    python -m benchmarks.mutation_score --count           # each module's mutant count, no run
    python -m benchmarks.mutation_score --recount         # record the counts that changed
    python -m benchmarks.mutation_score --module replies --survivors  # its survivors, again
    python -m benchmarks.mutation_score --module replies --function _entry  # a check, unrecorded

The modules scored are data (mutation_score.toml beside this file: one line a module, its file
and its OWN test files; a mutant only another module's tests kill is a gap of that module's
tests), and so are the verdicts on survivors read as equivalent, each with its reason.

Each module is parsed with ast, and every mutation point gives one mutant, a single edit: a
comparison operator swapped (< and <=, == and !=, in and not in, is and is not), flipped (<
and >, <= and >=) or complemented (< and >=, <= and >: where the comparison is not a whole
condition, whose negation is that mutant already), an arithmetic operator swapped, `and` and
`or` swapped, a condition negated (if, while, assert, a conditional expression, a
comprehension's if), a number changed (an int plus one,
a float doubled and halved), a constant index swapped for its neighbour (`e[2]` for `e[1]`; a
string key for the keys read before and after it on the same value in the function), two
neighbouring positional arguments of one kind swapped, a bound's start moved by one (a slice's
lower bound, a range's start), a `raise` made `pass`, a `not` (or a tensor's `~`) dropped, a
slice bound dropped, a `dim=` moved by one, a torch dtype swapped for its neighbour, a returned
value made None, an entry dropped from a module's table of objects (a tuple or list of calls:
the bundled mistakes). The count needs ast alone, so tests/test_mutation_score.py checks
quickly that each module still makes the count its figures were recorded with.

The checkout (without .git) is copied once to a temporary folder, so the engineers working in it
see nothing; each mutant is written there over its module (ast.unparse of the edited tree), and
the module's own test files run on it in a child forked from this process, which has imported
torch, pytest and hypothesis but never graders, so the child imports the mutant: -x, -n0, not
slow. The mutant is killed when a test fails or the run passes its time limit (3x the unmutated
run, plus 10 s). The unmutated module, written back by ast.unparse the same way, must pass first.
Each mutant's test files run with the one that killed the last mutant of the same function first
(the child's plugin names it): with -x, a killed mutant then costs one file's run, not the
files before it.

Printed per module: mutants, killed, survivors, and the score (killed / mutants, and killed /
the mutants not judged equivalent); each survivor with its line, its edit and its verdict.
The figures are written to mutation_figures.json (with the date and the CPU), and
benchmarks/README.md tabulates them. No test runs the score itself: it takes minutes a module.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

QUICK = "not slow"
DATA = Path(__file__).with_name("mutation_score.toml")  # the modules and the verdicts
FIGURES = Path(__file__).with_name("mutation_figures.json")  # the last run of each module


@dataclass(frozen=True)
class Module:
    """A scored module: its file, its own test files, whether those start workers."""

    name: str
    path: str
    tests: tuple[str, ...]
    workers: bool = True


def modules() -> dict[str, Module]:
    """The scored modules of mutation_score.toml, by name."""
    table = tomllib.loads(DATA.read_text())["modules"]
    return {
        name: Module(name, entry["path"], tuple(entry["tests"]), entry.get("workers", True))
        for name, entry in table.items()
    }


def verdicts() -> dict[tuple[str, str], str]:
    """(module, mutant's description) -> "equivalent: why", for each survivor read as one."""
    return {
        (entry["module"], description): f"equivalent: {entry['why']}"
        for entry in tomllib.loads(DATA.read_text()).get("equivalent", [])
        for description in entry["mutants"]
    }


def figures() -> dict[str, dict]:
    """The recorded figures of each module's last run (mutation_figures.json)."""
    return json.loads(FIGURES.read_text()) if FIGURES.exists() else {}


COMPARISONS = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
FLIPS = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE}  # the other way
COMPLEMENTS = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.LtE: ast.Gt, ast.Gt: ast.LtE}  # its negation
ARITHMETIC = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
}
DTYPES = {
    "float32": "float64",
    "float64": "float32",
    "bfloat16": "float16",
    "float16": "bfloat16",
    "int64": "int32",
    "int32": "int64",
}


@dataclass(frozen=True)
class Mutant:
    """The `index`-th edit of a module: where it is and what it does, in words."""

    index: int
    line: int
    description: str  # "function: before -> after", the key of VERDICTS


def _text(node: ast.AST) -> str:
    text = ast.unparse(node).replace("\n", " ")
    return text if len(text) <= 70 else text[:67] + "..."


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes))
    )


class Mutator(ast.NodeTransformer):
    """Walks a module's tree, counting mutation points in a fixed order; applies the one whose
    number is `target` (None: applies none) and lists every point in `found`."""

    def __init__(self, target: int | None = None):
        self.target, self.found, self.scope = target, [], ["<module>"]
        self.keys: list[dict[str, list]] = []  # per function: subscripted value -> its keys
        self.conditions: set[int] = set()  # ids of the one-operator comparisons that are a
        # whole condition: their complement is the condition's negation, a mutant made already

    def _point(
        self, node: ast.AST, before: ast.AST, after: ast.AST, edit: str | None = None
    ) -> bool:
        """Count a point (`edit` says what it does, by default "before -> after"); True when it
        is the one to apply."""
        index = len(self.found)
        description = f"{self.scope[-1]}: {edit or f'{_text(before)} -> {_text(after)}'}"
        self.found.append(Mutant(index, getattr(node, "lineno", 0), description))
        return index == self.target

    def _scoped(self, node):
        self.scope.append(node.name)
        function = not isinstance(node, ast.ClassDef)
        if function:
            self.keys.append(_constant_keys(node))
        try:
            return self.generic_visit(node)
        finally:
            self.scope.pop()
            if function:
                self.keys.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Module(self, node: ast.Module):
        self.keys.append(_constant_keys(node))
        return self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr):
        return node if _is_text(node.value) else self.generic_visit(node)  # docstrings

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swapped = COMPARISONS.get(type(op))
            if swapped is None:
                continue
            complement = None if id(node) in self.conditions else COMPLEMENTS.get(type(op))
            for other in (swapped, FLIPS.get(type(op)), complement):
                if other is None:
                    continue
                ops = [*node.ops[:i], other(), *node.ops[i + 1 :]]
                mutated = ast.Compare(node.left, ops, node.comparators)
                if self._point(node, node, mutated):
                    return ast.copy_location(mutated, node)
        return node

    def visit_BinOp(self, node: ast.BinOp):
        self.generic_visit(node)
        swapped = ARITHMETIC.get(type(node.op))
        if swapped is None or _is_text(node.left) or _is_text(node.right):
            return node
        mutated = ast.BinOp(node.left, swapped(), node.right)
        return ast.copy_location(mutated, node) if self._point(node, node, mutated) else node

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        mutated = ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
        return ast.copy_location(mutated, node) if self._point(node, node, mutated) else node

    def visit_Constant(self, node: ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return node
        changes = (
            [value + 1] if isinstance(value, int) else [value * 2, value / 2] if value else [1.0]
        )
        for changed in changes:
            mutated = ast.Constant(changed)
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        return node

    def visit_Assign(self, node: ast.Assign):
        """A module's table of objects (a tuple or list of two or more calls: the bundled
        mistakes) loses one entry."""
        self.generic_visit(node)
        table = node.value
        if (
            self.scope != ["<module>"]
            or not isinstance(table, (ast.Tuple, ast.List))
            or len(table.elts) < 2
            or not all(isinstance(e, ast.Call) for e in table.elts)
        ):
            return node
        for i, entry in enumerate(table.elts):
            mutated = type(table)([*table.elts[:i], *table.elts[i + 1 :]], ast.Load())
            if self._point(entry, table, mutated, f"{_text(node.targets[0])} drops {_text(entry)}"):
                node.value = ast.copy_location(mutated, table)
                return node
        return node

    def visit_Raise(self, node: ast.Raise):
        self.generic_visit(node)
        mutated = ast.Pass()
        return ast.copy_location(mutated, node) if self._point(node, node, mutated) else node

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, (ast.Not, ast.Invert)) and self._point(node, node, node.operand):
            return node.operand
        return node

    def visit_Slice(self, node: ast.Slice):
        self.generic_visit(node)
        for bound in ("lower", "upper"):
            if getattr(node, bound) is None:
                continue
            mutated = ast.Slice(
                **{"lower": node.lower, "upper": node.upper, "step": node.step, bound: None}
            )
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        for start in _moved(node.lower):
            mutated = ast.Slice(start, node.upper, node.step)
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        return node

    def visit_Subscript(self, node: ast.Subscript):
        """A constant index or key swapped for its neighbour: an int for the one before it (the
        one after is the number's own edit), a string for the keys of the same value read before
        and after it in the function."""
        self.generic_visit(node)
        key = node.slice
        if not isinstance(key, ast.Constant) or isinstance(key.value, bool):
            return node
        if type(key.value) is int:
            neighbours = [key.value - 1] if key.value > 0 else []
        elif type(key.value) is str:
            keys = self.keys[-1].get(ast.dump(node.value), []) if self.keys else []
            at = keys.index(key.value) if key.value in keys else -1
            neighbours = [keys[n] for n in (at - 1, at + 1) if at >= 0 and 0 <= n < len(keys)]
        else:
            return node
        for neighbour in neighbours:
            mutated = ast.Subscript(node.value, ast.Constant(neighbour), node.ctx)
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        return node

    def visit_Call(self, node: ast.Call):
        """Two neighbouring positional arguments of the same kind swapped; a range's start
        moved."""
        self.generic_visit(node)
        args = node.args
        for i in range(len(args) - 1):
            first, second = args[i], args[i + 1]
            if not _same_kind(first, second):
                continue
            mutated = ast.Call(node.func, [*args[:i], second, first, *args[i + 2 :]], node.keywords)
            if self._point(
                node,
                node,
                mutated,
                f"{_text(node.func)}(...) swaps {_text(first)} and {_text(second)}",
            ):
                return ast.copy_location(mutated, node)
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and args
            and not any(isinstance(a, ast.Starred) for a in args)
        ):
            start, rest = (args[0], args[1:]) if len(args) > 1 else (ast.Constant(0), args)
            starts = _moved(start) + ([ast.Constant(1)] if len(args) == 1 else [])
            for moved in starts:
                mutated = ast.Call(node.func, [moved, *rest], node.keywords)
                if self._point(node, node, mutated):
                    return ast.copy_location(mutated, node)
        return node

    def _condition(self, test: ast.AST) -> None:
        """Note `test` (a condition about to be negated) when it is one comparison, or `not`
        one: that comparison's complement would repeat the negation's (or the `not`'s) mutant."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test = test.operand
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            self.conditions.add(id(test))

    def _negated(self, node, field: str):
        """The condition `node.<field>` negated (one not there already: dropping it is the
        `not`'s own edit)."""
        test = getattr(node, field)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return node
        mutated = ast.UnaryOp(ast.Not(), test)
        if self._point(node, test, mutated):
            setattr(node, field, ast.copy_location(mutated, test))
        return node

    def visit_If(self, node: ast.If):
        self._condition(node.test)
        self.generic_visit(node)
        return self._negated(node, "test")

    visit_While = visit_IfExp = visit_Assert = visit_If

    def visit_comprehension(self, node: ast.comprehension):
        for test in node.ifs:
            self._condition(test)
        self.generic_visit(node)
        for i, test in enumerate(node.ifs):
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                continue
            mutated = ast.UnaryOp(ast.Not(), test)
            if self._point(test, test, mutated):
                node.ifs[i] = ast.copy_location(mutated, test)
                return node
        return node

    def visit_keyword(self, node: ast.keyword):
        self.generic_visit(node)
        if node.arg != "dim":
            return node
        try:
            dim = ast.literal_eval(node.value)
        except ValueError:
            return node
        if type(dim) is int:
            mutated = ast.keyword("dim", ast.Constant(dim - 1))
            if self._point(node.value, node, mutated):
                return mutated
        return node

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in DTYPES:
            mutated = ast.Attribute(node.value, DTYPES[node.attr], node.ctx)
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        return node

    def visit_Return(self, node: ast.Return):
        self.generic_visit(node)
        if node.value is None or (
            isinstance(node.value, ast.Constant) and node.value.value is None
        ):
            return node
        mutated = ast.Return(ast.Constant(None))
        return ast.copy_location(mutated, node) if self._point(node, node, mutated) else node


def _constant_keys(scope: ast.AST) -> dict[str, list]:
    """The string keys each value is subscripted with in `scope` (a function, or the module
    outside its functions), in the order they first appear: the neighbours of a key."""
    keys: dict[str, list] = {}
    pending = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue  # a function of its own
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and type(node.slice.value) is str
        ):
            found = keys.setdefault(ast.dump(node.value), [])
            if node.slice.value not in found:
                found.append(node.slice.value)
        pending.extend(ast.iter_child_nodes(node))
    return keys


def _moved(start: ast.AST | None) -> list[ast.AST]:
    """A bound's start moved by one each way (an int constant only back: the number's own edit
    moves it on)."""
    if start is None:
        return []
    if isinstance(start, ast.Constant) and type(start.value) is int:
        return [ast.Constant(start.value - 1)] if start.value > 0 else []
    return [
        ast.BinOp(start, ast.Add(), ast.Constant(1)),
        ast.BinOp(start, ast.Sub(), ast.Constant(1)),
    ]


def _same_kind(first: ast.AST, second: ast.AST) -> bool:
    """Two arguments a swap could confuse: the same node type (for constants, the same type of
    value), not the same text."""
    if type(first) is not type(second) or isinstance(first, ast.Starred):
        return False
    if isinstance(first, ast.Constant) and type(first.value) is not type(second.value):
        return False
    return ast.dump(first) != ast.dump(second)


def mutants(source: str) -> list[Mutant]:
    """Every mutation point of `source`, in order. A description met twice gets " #2" etc."""
    mutator = Mutator()
    mutator.visit(ast.parse(source))
    seen: dict[str, int] = {}
    found = []
    for mutant in mutator.found:
        seen[mutant.description] = seen.get(mutant.description, 0) + 1
        count = seen[mutant.description]
        found.append(
            Mutant(
                mutant.index, mutant.line, mutant.description + (f" #{count}" if count > 1 else "")
            )
        )
    return found


def mutated_source(source: str, index: int | None) -> str:
    """`source` with its `index`-th edit applied (None: none), as ast.unparse writes it."""
    tree = Mutator(index).visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


KILLER = ".mutation_killer"  # in the copy: the test file of a child's first failure


class _Killer:
    """A child's pytest plugin: writes the file of the first failing test to `path`."""

    def __init__(self, path: Path):
        self.path = path

    def pytest_runtest_logreport(self, report) -> None:
        if report.failed and not self.path.exists():
            self.path.write_text(report.nodeid.split("::", 1)[0])


def run_tests(copy: Path, tests: list[str], timeout: float, workers: bool = True) -> str:
    """Run `tests` in a forked child inside `copy` ("passed", "failed" or "timeout"); without
    `workers`, the suite's warm spawner of worker processes is not started. The file of the
    first failing test is left in `copy / KILLER`."""
    (copy / KILLER).unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # the child: imports graders from the copy, runs pytest, exits with its code
        code = 3
        try:
            os.chdir(copy)
            sys.path.insert(0, str(copy))
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            os.setpgid(0, 0)
            import hypothesis
            import pytest

            # A failing example kills the mutant as it is: shrinking it would take minutes.
            hypothesis.settings.register_profile(
                "mutant",
                database=None,
                phases=[
                    hypothesis.Phase.explicit,
                    hypothesis.Phase.reuse,
                    hypothesis.Phase.generate,
                ],
            )
            hypothesis.settings.load_profile("mutant")
            if not workers:
                import contextlib

                import graders.judge.workers

                graders.judge.workers.warm_workers = contextlib.nullcontext

            # no:unraisableexception: its gc.collect at the end, over a heap holding torch, took
            # a quarter of a child's time; it only reports, no verdict reads it
            code = int(
                pytest.main(
                    [
                        "-q",
                        "-x",
                        "-n0",
                        "-m",
                        QUICK,
                        "-p",
                        "no:cacheprovider",
                        "-p",
                        "no:unraisableexception",
                        *tests,
                    ],
                    plugins=[_Killer(copy / KILLER)],
                )
            )
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return "passed" if os.waitstatus_to_exitcode(status) == 0 else "failed"
        time.sleep(0.05)
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "timeout"


def _first(tests: list[str], killer: str | None) -> list[str]:
    """`tests`, the file that killed the function's last mutant first: a mutant of the same
    function is most often killed by the same file, and -x then stops at once. The verdict is
    the same in any order (killed when any test fails)."""
    return [killer, *(t for t in tests if t != killer)] if killer in tests else tests


def cpu() -> str:
    """The machine's CPU, as the recorded figures name it."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def score(
    module: Module, copy: Path, functions: tuple[str, ...] = (), last: dict | None = None
) -> dict | None:
    """Run every mutant of `module` in `copy` (only those of `functions`, when given; only the
    survivors of its `last` figures, when given: the others stay killed); print the figures and
    each survivor, and return them as mutation_figures.json records them (None: not scored)."""
    target, original = copy / module.path, (ROOT / module.path).read_text()
    tests = list(module.tests)
    every = mutants(original)
    found = [
        m
        for m in every
        if (not functions or m.description.split(":", 1)[0] in functions)
        and (last is None or m.description in last["survivors"])
    ]
    missing = [test for test in tests if not (copy / test).exists()]
    if missing:
        print(f"{module.name}: {', '.join(missing)} not found; not scored")
        return None
    began = time.monotonic()
    try:
        target.write_text(mutated_source(original, None))
        if run_tests(copy, tests, 600.0, module.workers) != "passed":
            print(
                f"{module.name}: its tests fail on the unmutated module (written by "
                "ast.unparse); not scored"
            )
            return None
        timeout = 3 * (time.monotonic() - began) + 10
        survivors = []
        killers: dict[str, str] = {}  # function -> the test file that killed its last mutant
        for mutant in found:
            function = mutant.description.split(":", 1)[0]
            target.write_text(mutated_source(original, mutant.index))
            if run_tests(copy, _first(tests, killers.get(function)), timeout, module.workers) == (
                "passed"
            ):
                survivors.append(mutant)
            elif (copy / KILLER).exists():
                killers[function] = (copy / KILLER).read_text()
    finally:
        target.write_text(original)
    read = verdicts()
    said = {
        m.description: read.get((module.name, m.description), "not yet read") for m in survivors
    }
    total = len(every) if last is not None else len(found)
    killed = total - len(survivors)
    equivalent = sum(verdict.startswith("equivalent") for verdict in said.values())
    judged = total - equivalent
    print(
        f"{module.name}: {total} mutants, {killed} killed, {len(survivors)} survived "
        f"({equivalent} equivalent): {killed / max(total, 1):.0%} of all, "
        f"{killed / max(judged, 1):.0%} of the non-equivalent"
    )
    for mutant in survivors:
        print(f"  line {mutant.line}: {mutant.description}\n      {said[mutant.description]}")
    sys.stdout.flush()
    minutes = (time.monotonic() - began) / 60 + (last["minutes"] if last is not None else 0)
    return {
        "mutants": total,
        "killed": killed,
        "equivalent": equivalent,
        "survivors": said,
        "scored": time.strftime("%Y-%m-%d"),
        "cpu": cpu(),
        "minutes": round(minutes, 1),
    }


def record(name: str, figures_: dict) -> None:
    """Write module `name`'s figures into mutation_figures.json, the others kept."""
    kept = figures()
    kept[name] = figures_
    FIGURES.write_text(json.dumps(dict(sorted(kept.items())), indent=1, ensure_ascii=False) + "\n")
    write_table()


TABLE_START, TABLE_END = (
    "<!-- figures: benchmarks.mutation_score writes this table -->",
    "<!-- end of the figures -->",
)


def write_table() -> None:
    """benchmarks/README.md's table of the recorded figures, rewritten between its markers."""
    rows = [
        "| module | mutants | killed | survivors: equivalent | survivors: gaps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, found in figures().items():
        if found.get("killed") is None:
            rows.append(f"| {name} | {found['mutants']} | not yet scored | | |")
        else:
            gaps = len(found["survivors"]) - found["equivalent"]
            rows.append(
                f"| {name} | {found['mutants']} | {found['killed']} | "
                f"{found['equivalent']} | {gaps} |"
            )
    readme = ROOT / "benchmarks" / "README.md"
    text = readme.read_text()
    head, rest = text.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    readme.write_text(f"{head}{TABLE_START}\n" + "\n".join(rows) + f"\n{TABLE_END}{tail}")


def main(argv: list[str] | None = None) -> None:
    table = modules()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--module",
        action="append",
        choices=sorted(table),
        help="a module to mutate (default: every one)",
    )
    parser.add_argument(
        "--count", action="store_true", help="print each module's mutant count and run nothing"
    )
    parser.add_argument(
        "--function",
        action="append",
        default=[],
        help="score only this function's mutants (repeatable): a check, not recorded",
    )
    parser.add_argument(
        "--survivors",
        action="store_true",
        help="run only the recorded survivors again (the module unchanged since: "
        "its count the recorded one), after tests were added",
    )
    parser.add_argument(
        "--recount",
        action="store_true",
        help="record the mutant count of each module whose count changed, its "
        "figures then not yet scored, and run nothing",
    )
    args = parser.parse_args(argv)
    if args.count or args.recount:
        recorded = figures()
        for name in args.module or table:
            count = len(mutants((ROOT / table[name].path).read_text()))
            print(f"{name}: {count} mutants")
            if args.recount and recorded.get(name, {}).get("mutants") != count:
                record(name, {"mutants": count, "killed": None})
                print(f"  recorded, not yet scored: score it again with --module {name}")
        return
    import hypothesis  # noqa: F401  imported once here, so that each forked child has them
    import pytest  # noqa: F401
    import torch  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="mutation_score_") as folder:
        copy = Path(folder) / "checkout"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        for name in args.module or table:
            last = figures().get(name) if args.survivors else None
            if args.survivors and (
                last is None
                or last.get("killed") is None
                or last["mutants"] != len(mutants((ROOT / table[name].path).read_text()))
            ):
                print(f"{name}: changed since its figures (or never scored): score it whole")
                continue
            scored = score(table[name], copy, tuple(args.function), last)
            if scored is not None and not args.function:
                record(name, scored)


if __name__ == "__main__":
    main()
