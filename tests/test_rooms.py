"""The rooms of graders/ (graders/README.md) import one another only in the directions below,
and neither graders/ nor benchmarks/ has an import circle.

The allowed directions are written once, here, as data. Every import counts: at the top of a
file or inside a function, `import graders.x` and `from graders import x` alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# room -> the rooms it may import (besides itself). A room is a folder of graders/.
ALLOWED = {
    "worker": set(),  # runs beside the candidate's code: nothing of the judge's side
    "shared": {"worker"},  # what every track uses: the wire's types, never a track or the judge
    "judge": {"shared", "worker"},  # loads the tracks' items by name at run time, not by import
    "dense": {"shared", "judge", "worker"},
    "serving": {"shared", "judge", "worker"},
    "batching": {"shared", "judge", "worker"},
    "formats": {"shared", "judge"},
    "workflows": {"shared", "judge", "formats"},
    "interview": {"shared", "judge", "formats", "workflows"},
    "export": {"shared", "judge"},
}
TRACKS = {"dense", "serving", "batching"}


def imported_modules(source: str) -> set[str]:
    """Every module `source` imports, dotted: `from graders import x` gives graders.x."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def room_of(module: str) -> str | None:
    """The room a dotted module of graders belongs to, None outside graders' rooms."""
    parts = module.split(".")
    return parts[1] if parts[0] == "graders" and len(parts) > 1 and parts[1] in ALLOWED else None


def trespasses(room: str, source: str) -> list[str]:
    """The imports in `source`, a file of `room`, that the room may not make."""
    return sorted(
        module
        for module in imported_modules(source)
        if (to := room_of(module)) and to != room and to not in ALLOWED[room]
    )


def graders_files() -> list[tuple[str, Path]]:
    return [
        (path.relative_to(ROOT / "graders").parts[0], path)
        for path in sorted((ROOT / "graders").rglob("*.py"))
        if len(path.relative_to(ROOT / "graders").parts) > 1 and "_data" not in path.parts
    ]


def test_every_folder_of_graders_is_a_room_with_its_directions():
    folders = {
        p.name
        for p in (ROOT / "graders").iterdir()
        if p.is_dir() and not p.name.startswith(("_", "."))
    }
    assert folders == set(ALLOWED)


@pytest.mark.parametrize(
    "room,path",
    graders_files(),
    ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else "",
)
def test_a_room_imports_only_the_rooms_it_may(room, path):
    assert trespasses(room, path.read_text()) == []


@pytest.mark.parametrize(
    "room,source,expected",
    [
        ("serving", "from graders.dense import decode_loop\n", ["graders.dense.decode_loop"]),
        ("batching", "def f():\n    import graders.serving.model\n", ["graders.serving.model"]),
        ("worker", "from graders.judge.grade import grade\n", ["graders.judge.grade.grade"]),
        ("shared", "from graders import judge\n", ["graders.judge"]),
        (
            "shared",
            "from graders.serving.items import eviction\n",
            ["graders.serving.items.eviction"],
        ),
        (
            "judge",
            "from graders.formats.report import to_json\n",
            ["graders.formats.report.to_json"],
        ),
        (
            "dense",
            "from graders.shared import cases\nfrom graders.judge.candidate import Candidate\n",
            [],
        ),
    ],
    ids=[
        "track-imports-another-track",
        "inside-a-function",
        "worker-imports-judge",
        "shared-imports-judge",
        "shared-imports-a-track",
        "judge-imports-formats",
        "allowed",
    ],
)
def test_the_check_names_each_import_a_room_may_not_make(room, source, expected):
    assert trespasses(room, source) == expected


def test_no_track_may_import_another_track():
    for track in TRACKS:
        assert not ALLOWED[track] & TRACKS


def import_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports (a name imported from a package module
    counts as that module)."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / package).rglob("*.py")
        if "_data" not in p.parts
    }
    graph = {}
    for module, path in files.items():
        targets = set()
        for name in imported_modules(path.read_text()):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module and name != package:
                targets.add(name)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v), on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("package", ["graders", "benchmarks"])
def test_no_import_circles(package):
    assert circles(import_graph(package)) == []


def test_the_circle_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
