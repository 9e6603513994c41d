"""The rubric data matches the contract, and every item has a public grader."""

from __future__ import annotations

from graders.grade import PUBLIC, load_graders
from graders.rubric import load

CONTRACT_ITEMS = {
    "L4": {"append-time-dim", "attend-shape"},
    "L5": {"prefix-equivalence", "validate-shapes", "validate-dtype-device", "stable-softmax",
           "reset", "release", "length-vs-capacity", "ragged-batch", "kv-only", "own-tests"},
    "L6": {"gqa", "rope-absolute", "rope-fork-offset", "beam-reorder", "finished-beams",
           "low-precision", "prealloc"},
    "serving": {"paged-equivalence", "paged-block-table", "paged-cow", "paged-free", "admission",
                "eviction", "quantized-kv"},
}
CONTRACT_TELLS = {"caches-q": "L4", "recomputes-projections": "L4", "shape-only-tests": "L4",
                  "concat-every-step": "L5"}


def test_items_and_levels_are_the_contracts():
    rubric = load()
    for level, ids in CONTRACT_ITEMS.items():
        assert {i.id for i in rubric.items if i.level == level} == ids, level


def test_tells_and_their_caps_are_the_contracts():
    assert {t.id: t.caps for t in load().tells} == CONTRACT_TELLS


def test_each_track_has_100_points_and_every_item_teaches():
    rubric = load()
    for track in ("dense", "serving"):
        assert sum(i.points for i in rubric.track(track)) == 100, track
    for item in rubric.items:
        assert item.points > 0 and item.title and item.checks, item.id
        assert len(item.hints) >= 2, f"{item.id} needs hints from a nudge to nearly the answer"


def test_every_item_has_exactly_one_public_grader():
    graders = [g.item for g in load_graders(PUBLIC, hidden=False)]
    assert sorted(graders) == sorted(i.id for i in load().items)

