"""A correct implementation no one can know ahead of a grade: the reference, rewritten.

`own-tests` runs the candidate's tests on the reference and on `disguise(reference, seed)`: the
same code with its private and local names renamed, its independent definitions in another
order, its docstrings gone and its layout `ast.unparse`'s. It computes exactly what the reference
computes (the same operations on the same tensors, in the same order), so tests that check
behaviour pass on it; tests that recognise the reference (a private name, a hash of its source
or code, its docstrings) fail on it. The bundled mistakes are disguised with the same seed, so
that what tells the disguise from the reference tells no mistake from it.

What is rewritten, and why it keeps the meaning:
- module-level names that start with "_" (helpers, constants), everywhere in the module;
- the local variables of each function that has no nested scope (not its parameters: callers
  may pass them by keyword; not names declared global or nonlocal, nor names the module or the
  builtins bind, which a comprehension's variable could shadow);
- attributes the module sets on an object (`cache.k_storage = ...`) other than the contract's
  (`keys`, `values`, `lengths`, `capacity`) and dunders, unless a string of the module names
  them (getattr);
- runs of consecutive function definitions, at module level and in a class body, shuffled when
  their names are distinct and nothing evaluated at definition (decorators, defaults,
  annotations) names another function of the run. Public names of the contract never change.

A new name depends on the seed and the old name alone (but for a clash with a name the module
uses, or one given already, 1 in 78,400 a pair: then it draws again), and a run's order on
the seed and the run's names: a mistake disguised with the same seed gets the same names and
order as the disguised reference.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import keyword
import random

from graders.shared.mutation import PARSE_LOCK

CONTRACT_ATTRIBUTES = frozenset({"keys", "values", "lengths", "capacity"})
WORDS = (
    "acc",
    "aux",
    "blk",
    "buf",
    "cur",
    "dim",
    "grid",
    "hold",
    "item",
    "kept",
    "mat",
    "node",
    "part",
    "pick",
    "pool",
    "rank",
    "row",
    "seg",
    "slab",
    "slot",
    "span",
    "step",
    "tab",
    "tile",
    "unit",
    "vec",
    "view",
    "work",
)

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def disguise(source: str, seed: int) -> str:
    """`source` (Python) rewritten as the module docstring says, deterministically from `seed`.
    SyntaxError when `source` does not parse."""
    with PARSE_LOCK:  # CPython 3.11's ast.parse fails in threads parsing at once (grade-all's)
        tree = ast.parse(source)
    _drop_docstrings(tree)
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | _defined(tree)
    names = _Names(seed, taken)
    _rename_private_globals(tree, names)
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _rename_locals(function, names, _module_names(tree))
    _rename_attributes(tree, names)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef)):
            node.body = _shuffled_definitions(node.body, seed)
    return ast.unparse(tree) + "\n"


class _Names:
    """New names from the seed, two words and a number: the same old name gets the same new
    one, and no new name is one the module uses already."""

    def __init__(self, seed: int, taken: set[str]):
        self.seed, self.taken, self.given = seed, set(taken), {}

    def __call__(self, old: str) -> str:
        if old not in self.given:
            for attempt in range(1000):
                digest = hashlib.sha256(f"{self.seed}:{old}:{attempt}".encode()).digest()
                new = f"{WORDS[digest[0] % len(WORDS)]}_{WORDS[digest[1] % len(WORDS)]}"
                new = ("_" if old.startswith("_") else "") + new + str(digest[2] % 100)
                if new not in self.taken and not keyword.iskeyword(new):
                    break
            self.taken.add(new)
            self.given[old] = new
        return self.given[old]


def _drop_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and ast.get_docstring(node, clean=False) is not None
        ):
            node.body = node.body[1:] or [ast.Pass()]


def _defined(tree: ast.Module) -> set[str]:
    """Every name a def, class, argument, import or except clause of the module binds."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
        elif isinstance(node, ast.alias):
            found.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


def _module_names(tree: ast.Module) -> set[str]:
    """The names the module's top level binds."""
    found = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(statement.name)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name).split(".")[0] for a in statement.names}
        else:
            found |= {
                n.id
                for n in ast.walk(statement)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
    return found


def _rename_private_globals(tree: ast.Module, names: _Names) -> None:
    private = {
        name for name in _module_names(tree) if name.startswith("_") and not name.startswith("__")
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in private:
            node.id = names(node.id)
        elif isinstance(node, ast.Global):
            node.names = [names(name) if name in private else name for name in node.names]
        elif (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and node.name in private
            and node in tree.body
        ):
            node.name = names(node.name)


def _rename_locals(
    function: ast.FunctionDef | ast.AsyncFunctionDef, names: _Names, module_names: set[str]
) -> None:
    inside = [n for statement in function.body for n in ast.walk(statement)]
    if any(isinstance(n, _SCOPES) for n in inside):
        return  # a nested scope could read or rebind them: left as written
    arguments = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    declared = {
        name for n in inside if isinstance(n, (ast.Global, ast.Nonlocal)) for name in n.names
    }
    bound = {n.id for n in inside if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {n.name for n in inside if isinstance(n, ast.ExceptHandler) and n.name}
    bound |= {
        (a.asname or a.name).split(".")[0]
        for n in inside
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    local = {
        name
        for name in bound - arguments - declared - module_names - set(dir(builtins))
        if name.strip("_")
    }  # `_`, the name of what is thrown away, stays
    for node in inside:
        if isinstance(node, ast.Name) and node.id in local:
            node.id = names(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name in local:
            node.name = names(node.name)
        elif isinstance(node, ast.alias) and (node.asname or node.name) in local:
            node.asname = names(node.asname or node.name)


def _rename_attributes(tree: ast.Module, names: _Names) -> None:
    strings = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    own = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name)
    }
    own = {a for a in own - CONTRACT_ATTRIBUTES - strings if not a.startswith("__")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in own:
            node.attr = names(node.attr)


def _shuffled_definitions(body: list[ast.stmt], seed: int) -> list[ast.stmt]:
    """`body` with each movable run of consecutive function definitions in a seeded order."""
    result, run = [], []
    for statement in [*body, None]:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            run.append(statement)
            continue
        result += _shuffled_run(run, seed)
        run = []
        if statement is not None:
            result.append(statement)
    return result


def _shuffled_run(run: list[ast.stmt], seed: int) -> list[ast.stmt]:
    names = [d.name for d in run]
    evaluated_at_definition = [
        n.id
        for d in run
        for part in (
            *d.decorator_list,
            *d.args.defaults,
            *d.args.kw_defaults,
            d.returns,
            *(a.annotation for a in ast.walk(d.args) if isinstance(a, ast.arg)),
        )
        if part is not None
        for n in ast.walk(part)
        if isinstance(n, ast.Name)
    ]
    if len(set(names)) != len(names) or set(names) & set(evaluated_at_definition):
        return run
    order = list(run)
    random.Random(f"{seed}:{','.join(names)}").shuffle(order)
    return order
