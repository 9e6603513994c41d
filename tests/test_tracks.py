"""graders.shared.tracks: one definition of each track, which the rubric and every command follow."""

from __future__ import annotations

import pytest

from graders.shared import tracks
from graders.shared.rubric import load
from graders.shared.tracks import BATCHING, DENSE, SERVING, TRACKS


def test_every_rubric_item_belongs_to_exactly_one_track():
    for item in load().items:
        owners = [t.id for t in TRACKS.values() if t.owns(item.level)]
        assert len(owners) == 1, f"{item.id} ({item.level}) belongs to {owners}"


def test_the_dense_track_has_levels_and_own_tests_and_the_serving_and_batching_tracks_neither():
    assert DENSE.levels and DENSE.tests == "test_kv_cache.py" and DENSE.module == "kv_cache"
    assert not SERVING.levels and SERVING.tests is None and SERVING.section == "serving"
    assert not BATCHING.levels and BATCHING.tests is None and BATCHING.section == "batching"


def test_an_unknown_track_names_the_choices():
    with pytest.raises(KeyError, match="'dense', 'serving' or 'batching'"):
        tracks.get("sparse")


def test_reports_group_the_levels_first_then_the_tracks_beside_them():
    groups = tracks.groups(load().levels)
    assert [g[0] for g in groups] == ["L4", "L5", "L6", "L6+", "serving", "batching"]
    assert groups[-2][2] is SERVING and groups[-1][2] is BATCHING
