"""The rubric data matches the contract; every item is one file of its track's items package,
holding its public grader and, but for own-tests, its hidden one; items never import each other."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from graders.judge.grade import kata_graders
from graders.shared.rubric import PLUS, load
from graders.shared.tracks import TRACKS

CONTRACT_ITEMS = {
    "L4": {"append-time-dim", "attend-shape"},
    "L5": {
        "prefix-equivalence",
        "validate-shapes",
        "validate-dtype-device",
        "stable-softmax",
        "reset",
        "release",
        "length-vs-capacity",
        "ragged-batch",
        "kv-only",
        "own-tests",
    },
    "L6": {
        "gqa",
        "rope-absolute",
        "rope-fork-offset",
        "beam-reorder",
        "finished-beams",
        "low-precision",
        "prealloc",
    },
    # contract section 8; the level rule is "every L6+ item passes" whatever their number
    "L6+": {"chunk-causal-mask", "speculative-rollback", "sliding-window", "real-model"},
    "serving": {
        "paged-equivalence",
        "paged-block-table",
        "paged-cow",
        "paged-free",
        "admission",
        "eviction",
        "quantized-kv",
    },
}
CONTRACT_TELLS = {
    "caches-q": "L4",
    "recomputes-projections": "L4",
    "shape-only-tests": "L4",
    "concat-every-step": "L5",
}


def test_items_and_levels_are_the_contracts():
    rubric = load()
    for level, ids in CONTRACT_ITEMS.items():
        assert {i.id for i in rubric.items if i.level == level} == ids, level


def test_tells_and_their_caps_are_the_contracts():
    assert {t.id: t.caps for t in load().tells} == CONTRACT_TELLS


def test_each_track_has_100_points_and_every_item_teaches():
    rubric = load()
    for track in TRACKS.values():
        core = [i for i in rubric.track(track) if i.level != PLUS]
        assert sum(i.points for i in core) == 100, track.id
    plus = [i for i in rubric.items if i.level == PLUS]
    assert rubric.levels[-1] == PLUS and plus and all(i.points == 10 for i in plus)
    for item in rubric.items:
        assert item.points > 0 and item.title and item.checks, item.id
        assert len(item.hints) >= 2, f"{item.id} needs hints from a nudge to nearly the answer"


def test_every_item_has_exactly_one_public_grader():
    graders = [g.item for g in kata_graders(hidden=False)]
    assert sorted(graders) == sorted(i.id for i in load().items)


def test_every_item_but_own_tests_has_exactly_one_hidden_grader_in_its_own_file():
    hidden = [g.item for g in kata_graders(hidden=True)]
    assert sorted(hidden) == sorted(i.id for i in load().items if i.id != "own-tests")
    public = {g.item: g.grade.__module__ for g in kata_graders(hidden=False)}
    assert all(g.grade.__module__ == public[g.item] for g in kata_graders(hidden=True))


def test_items_share_code_through_library_modules_never_through_each_other():
    folders = [Path(importlib.import_module(t.items).__path__[0]) for t in TRACKS.values()]
    for path in sorted(p for folder in folders for p in folder.glob("*.py")):
        items = {name for name in _imports(path) if ".items" in name}
        assert not items, f"{path.name} imports {sorted(items)}"


def _imports(path) -> set[str]:
    """The modules and names a file imports: `from graders import x` gives graders and
    graders.x."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_a_track_lists_its_own_interviewer_items_else_the_levels():
    rubric = load()
    of = {
        track_id: {i.id for i in rubric.interviewer_of(track)} for track_id, track in TRACKS.items()
    }
    levels = {i.id for i in rubric.interviewer if i.level in rubric.levels}
    assert of["dense"] == of["serving"] == levels and "gqa-memory" in levels
    assert of["batching"] == {"why-iteration-level", "recompute-or-swap", "token-budget"}


def test_dependencies_name_items_of_the_same_track_without_cycles():
    """`depends_on` (graders.formats.causes groups a failure under a failing dependency's cause):
    every id is an item of the item's own track, never itself, and following them never comes
    back to where it started."""
    rubric = load()
    items = {i.id: i for i in rubric.items}
    for item in rubric.items:
        track = next(t for t in TRACKS.values() if t.owns(item.level))
        for dep in item.depends_on:
            assert dep in items and track.owns(items[dep].level) and dep != item.id, (item.id, dep)

    def reaches(start: str, at: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            dep == start or (dep not in seen and reaches(start, dep, seen | {dep}))
            for dep in items[at].depends_on
        )

    assert not [i for i in items if reaches(i, i)], "a cycle of depends_on"
    assert items["prefix-equivalence"].depends_on, "the core items are data, not a guess"
