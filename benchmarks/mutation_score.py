"""Mutation score of the judge's core: how many single-edit mutants its own quick tests kill.

    python -m benchmarks.mutation_score                   # every module in MODULES
    python -m benchmarks.mutation_score --module compare  # one (repeat --module for more)

Each module is parsed with ast, and every mutation point gives one mutant, a single edit: a
comparison operator swapped (< and <=, == and !=, in and not in, is and is not), an arithmetic
operator swapped, `and` and `or` swapped, a number changed (an int plus one, a float doubled and
halved), a `raise` made `pass`, a `not` (or a tensor's `~`) dropped, a slice bound dropped, a
`dim=` moved by one, a torch dtype swapped for its neighbour, a returned value made None, an
entry dropped from a module's table of objects (a tuple or list of calls: the bundled mistakes).
The checkout (without .git) is copied once to a temporary folder, so the engineers working in it
see nothing; each mutant is written there over its module (ast.unparse of the edited tree), and
the module's quick tests (MODULES) run on it in a child forked from this process, which has
imported torch and pytest but never graders, so the child imports the mutant: -x, -n0, not
slow. The mutant is killed when a test fails or the run passes its time limit (3x the unmutated
run, plus 10 s). The unmutated module, written back by ast.unparse the same way, must pass
first.

Printed per module: mutants, killed, survivors, and the score (killed / mutants, and killed /
the mutants not judged equivalent); each survivor with its line, its edit and, when one has read
it, the verdict VERDICTS (or MODULE_VERDICTS, for a module's survivors read as a group) holds
for it ("equivalent: why" or "gap: why"). No test runs this script: it takes minutes, and its
figures are for reading (docs/decisions.md).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

QUICK = "not slow"
# module name -> (its file, the test files that judge it: their quick tests run, with -x)
MODULES = {
    "compare": ("graders/shared/compare.py", ["tests/test_compare.py", "tests/test_tolerances.py"]),
    "reference": ("graders/shared/reference.py", ["tests/test_reference.py",
                                           "tests/test_tolerances.py"]),
    "hidden_cases": ("graders/shared/hidden_cases.py", ["tests/test_hidden_cases.py"]),
    "tolerances": ("graders/shared/tolerances.py", ["tests/test_tolerance_measurement.py"]),
    "mistakes": ("graders/dense/mistakes.py", ["tests/test_mutation.py",
                                         "tests/test_bundled_mistakes.py"]),
    "candidate": ("graders/judge/candidate.py", ["tests/test_candidate_unit.py",
                                           "tests/test_hidden_cases.py",
                                           "tests/test_tolerances.py", "tests/test_prealloc.py"]),
    "worker/wire": ("graders/worker/wire.py", ["tests/test_wire.py",
                                               "tests/test_reply_boundary.py",
                                               "tests/test_wire_limits.py"]),
    "worker/frames": ("graders/worker/frames.py", ["tests/test_wire.py",
                                                   "tests/test_reply_boundary.py",
                                                   "tests/test_wire_limits.py"]),
    "replies": ("graders/judge/replies.py", ["tests/test_reply_boundary.py", "tests/test_replies.py"]),
}
# Modules whose tests start no worker: their children skip the suite's warm spawner of workers
# (a process importing torch, 2.5 s of CPU a mutant).
NO_WORKERS = {"compare", "reference", "hidden_cases", "tolerances"}

# (module, mutant's description) -> the verdict of one who read the surviving mutant.
_REL_FLOOR = ("equivalent: the floor only keeps max_rel finite where the reference is exactly 0; "
              "the figure there is error / floor, absurdly large at any floor, and no verdict "
              "reads it")
_SHORT_ERRORS = ("equivalent: no error that try catches has a message long enough to be cut "
                 "(the longest, int's 4,300-digit limit, makes the message about 180 characters)")

_WORDING = ("equivalent for the verdict: only the words of a malformed reply's message change "
            "(the tests assert its kind, not its wording)")


def _each(module: str, verdict: str, *descriptions: str) -> dict:
    """One verdict for several survivors of `module`."""
    return {(module, description): verdict for description in descriptions}


VERDICTS = {
    **_each("compare", _REL_FLOOR, "first_divergence: 1e-12 -> 2e-12",
            "first_divergence: 1e-12 -> 5e-13"),
    ("tolerances", "<module>: 50 -> 51"): (
        "equivalent for the judge: how many extra seeds `python -m graders.shared.tolerances` measures "
        "(the docstrings quote 51 in all); no constant, verdict or grade reads it"),
    ("worker/wire", "_rebuild: offset + nbytes -> offset - nbytes #2"): (
        "equivalent: that return is taken only when numel is 0, so nbytes is 0"),
    **_each("worker/wire", _SHORT_ERRORS, "decode: 200 -> 201", "decode: :200 -> :",
            "_rebuild: 200 -> 201", "_rebuild: :200 -> :"),
    **_each("replies", _WORDING, "_op_result: 'ok' in fields -> 'ok' not in fields #2",
            "_shown: 8 -> 9", "_shown: :8 -> :", "_shown: 60 -> 61",
            "_bounded: type(n) is not int -> type(n) is int #2"),
    ("replies", "_bounded: return n -> return None"): (
        "equivalent: _cache_state calls _bounded for its check alone"),
    ("replies", "<module>: 4000 -> 4001"): (
        "equivalent: how long a kept traceback's tail is (tests/test_replies.py pins that it is "
        "cut to MAX_TAIL, its end kept); the 2,000-character quote still bounds what is shown"),
    ("replies", "started: return fields -> return None"): (
        "equivalent: graders.judge.workers calls started() for its check alone"),
    ("replies", "_ok: raise MalformedReply(f'{what}: the judge knows no operation {_shown... -> "
                "pass"): "equivalent for replies: the operation is the judge's own plan's",
    **_each("worker/frames", "equivalent: how much is read at a time, not what",
            "<module>: 1 -> 2", "<module>: 20 -> 21", "_read_into: :CHUNK -> :"),
    **_each("worker/frames", "equivalent for the contract: the cap on the judge's own requests "
            "(trusted) guards against a bug only", "<module>: 1 -> 2 #2", "<module>: 28 -> 29",
            "<module>: 1 -> 2 #3", "<module>: 28 -> 29 #2"),
    **_each("worker/frames", _WORDING, "payload_size: HEADER.size + len(header) -> HEADER.size "
            "- len(header)", "payload_size: HEADER.size + len(header) + payload -> HEADER.size "
            "+ len(header) - payload"),
    **_each("worker/frames", _SHORT_ERRORS,
            "payload_size: 200 -> 201", "payload_size: :200 -> :"),
    ("worker/frames", "payload_size: raise TypeError('the tensors are not a list') -> pass"): (
        "equivalent: a non-list still fails (iterating it raises an error caught there, or an "
        "empty dict reaches wire.decode, which rejects it)"),
}

# A verdict on every survivor of a module that no entry above names, read as a group.
MODULE_VERDICTS: dict[str, str] = {}

COMPARISONS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
               ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
               ast.Is: ast.IsNot, ast.IsNot: ast.Is}
ARITHMETIC = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
              ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
DTYPES = {"float32": "float64", "float64": "float32", "bfloat16": "float16",
          "float16": "bfloat16", "int64": "int32", "int32": "int64"}


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
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, (str, bytes)))


class Mutator(ast.NodeTransformer):
    """Walks a module's tree, counting mutation points in a fixed order; applies the one whose
    number is `target` (None: applies none) and lists every point in `found`."""

    def __init__(self, target: int | None = None):
        self.target, self.found, self.scope = target, [], ["<module>"]

    def _point(self, node: ast.AST, before: ast.AST, after: ast.AST,
               edit: str | None = None) -> bool:
        """Count a point (`edit` says what it does, by default "before -> after"); True when it
        is the one to apply."""
        index = len(self.found)
        description = f"{self.scope[-1]}: {edit or f'{_text(before)} -> {_text(after)}'}"
        self.found.append(Mutant(index, getattr(node, "lineno", 0), description))
        return index == self.target

    def _scoped(self, node):
        self.scope.append(node.name)
        try:
            return self.generic_visit(node)
        finally:
            self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Expr(self, node: ast.Expr):
        return node if _is_text(node.value) else self.generic_visit(node)  # docstrings

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            swapped = COMPARISONS.get(type(op))
            if swapped is None:
                continue
            ops = [*node.ops[:i], swapped(), *node.ops[i + 1:]]
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
        changes = ([value + 1] if isinstance(value, int) else [value * 2, value / 2] if value
                   else [1.0])
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
        if (self.scope != ["<module>"] or not isinstance(table, (ast.Tuple, ast.List))
                or len(table.elts) < 2 or not all(isinstance(e, ast.Call) for e in table.elts)):
            return node
        for i, entry in enumerate(table.elts):
            mutated = type(table)([*table.elts[:i], *table.elts[i + 1:]], ast.Load())
            if self._point(entry, table, mutated,
                           f"{_text(node.targets[0])} drops {_text(entry)}"):
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
            mutated = ast.Slice(**{"lower": node.lower, "upper": node.upper, "step": node.step,
                                   bound: None})
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
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
        if (isinstance(node.value, ast.Name) and node.value.id == "torch"
                and node.attr in DTYPES):
            mutated = ast.Attribute(node.value, DTYPES[node.attr], node.ctx)
            if self._point(node, node, mutated):
                return ast.copy_location(mutated, node)
        return node

    def visit_Return(self, node: ast.Return):
        self.generic_visit(node)
        if node.value is None or (isinstance(node.value, ast.Constant)
                                  and node.value.value is None):
            return node
        mutated = ast.Return(ast.Constant(None))
        return ast.copy_location(mutated, node) if self._point(node, node, mutated) else node


def mutants(source: str) -> list[Mutant]:
    """Every mutation point of `source`, in order. A description met twice gets " #2" etc."""
    mutator = Mutator()
    mutator.visit(ast.parse(source))
    seen: dict[str, int] = {}
    found = []
    for mutant in mutator.found:
        seen[mutant.description] = seen.get(mutant.description, 0) + 1
        count = seen[mutant.description]
        found.append(Mutant(mutant.index, mutant.line, mutant.description
                            + (f" #{count}" if count > 1 else "")))
    return found


def mutated_source(source: str, index: int | None) -> str:
    """`source` with its `index`-th edit applied (None: none), as ast.unparse writes it."""
    tree = Mutator(index).visit(ast.parse(source))
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def run_tests(copy: Path, tests: list[str], timeout: float, workers: bool = True) -> str:
    """Run `tests` in a forked child inside `copy` ("passed", "failed" or "timeout"); without
    `workers`, the suite's warm spawner of worker processes is not started."""
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
            import pytest

            if not workers:
                import contextlib

                import graders.judge.workers

                graders.judge.workers.warm_workers = contextlib.nullcontext

            code = int(pytest.main(["-q", "-x", "-n0", "-m", QUICK, "-p", "no:cacheprovider",
                                    *tests]))
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


def score(name: str, copy: Path) -> None:
    """Run every mutant of module `name` in `copy`; print the figures and each survivor."""
    path, tests = MODULES[name]
    target, original = copy / path, (ROOT / path).read_text()
    workers = name not in NO_WORKERS
    found = mutants(original)
    missing = [test for test in tests if not (copy / test).exists()]
    if missing:
        print(f"{name}: {', '.join(missing)} not found; not scored")
        return
    try:
        target.write_text(mutated_source(original, None))
        started = time.monotonic()
        if run_tests(copy, tests, 600.0, workers) != "passed":
            print(f"{name}: its tests fail on the unmutated module (written by ast.unparse); "
                  "not scored")
            return
        timeout = 3 * (time.monotonic() - started) + 10
        survivors = []
        for mutant in found:
            target.write_text(mutated_source(original, mutant.index))
            if run_tests(copy, tests, timeout, workers) == "passed":
                survivors.append(mutant)
    finally:
        target.write_text(original)
    killed = len(found) - len(survivors)
    equivalent = sum(VERDICTS.get((name, m.description), "").startswith("equivalent")
                     for m in survivors)
    judged = len(found) - equivalent
    print(f"{name}: {len(found)} mutants, {killed} killed, {len(survivors)} survived "
          f"({equivalent} equivalent): {killed / max(len(found), 1):.0%} of all, "
          f"{killed / max(judged, 1):.0%} of the non-equivalent")
    for mutant in survivors:
        verdict = VERDICTS.get((name, mutant.description),
                               MODULE_VERDICTS.get(name, "not yet read"))
        print(f"  line {mutant.line}: {mutant.description}\n      {verdict}")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", action="append", choices=sorted(MODULES),
                        help="a module to mutate (default: every one)")
    args = parser.parse_args(argv)
    import pytest  # noqa: F401  imported once here, so that each forked child has it
    import torch  # noqa: F401

    with tempfile.TemporaryDirectory(prefix="mutation_score_") as folder:
        copy = Path(folder) / "checkout"
        shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        for name in args.module or MODULES:
            score(name, copy)


if __name__ == "__main__":
    main()
