"""The tracks a candidate can be graded on: the one place that says what a track is.

dense     the question itself: kv_cache.py and the candidate's own tests, graded by levels
          L4-L6 and capped by the down-level tells (contract sections 1-3)
serving   beyond L6: paged_kv_cache.py, a paged cache for many sequences, graded all or
          nothing beside the levels, with no own-tests item and no tells (section 4)
batching  the question's "related" topic: scheduler.py, continuous batching over a paged
          pool, graded as the serving track is (section 6)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Track:
    """`module` is the name the candidate's file is imported as, `implementation` and `tests`
    the file names in a workspace (`tests` None: the track has no own-tests item), `items` the
    package holding one grader file per item of the track. A track with
    `levels` is graded by the rubric's levels; one without carries `section` in its items'
    `level` field and reaches that name when every item passes."""

    id: str
    title: str
    module: str
    implementation: str
    tests: str | None
    levels: bool
    items: str
    section: str | None = None

    def runs_tests(self, item_ids) -> bool:
        """Whether grading the items `item_ids` runs the candidate's own tests: only the
        own-tests item does, so a run without it starts no worker for them."""
        return self.tests is not None and TESTS_ITEM in item_ids

    def runs_model(self, item_ids) -> bool:
        """Whether grading the items `item_ids` runs the real-model item, whose two workers
        then start with the grade (graders.judge.workers.GradeWorkers)."""
        return self.levels and MODEL_ITEM in item_ids

    def owns(self, item_level: str) -> bool:
        """Whether a rubric item whose `level` field reads `item_level` belongs to this track."""
        return item_level == self.section if self.section else item_level not in SECTIONS


TESTS_ITEM = "own-tests"  # the rubric item that runs the candidate's own tests
MODEL_ITEM = "real-model"  # the rubric item that runs the candidate's cache inside transformers

DENSE = Track(
    "dense",
    "the levels",
    "kv_cache",
    "kv_cache.py",
    "test_kv_cache.py",
    levels=True,
    items="graders.dense.items",
)
SERVING = Track(
    "serving",
    "serving track",
    "paged_kv_cache",
    "paged_kv_cache.py",
    None,
    levels=False,
    items="graders.serving.items",
    section="serving",
)
BATCHING = Track(
    "batching",
    "batching track",
    "scheduler",
    "scheduler.py",
    None,
    levels=False,
    items="graders.batching.items",
    section="batching",
)
TRACKS = {track.id: track for track in (DENSE, SERVING, BATCHING)}
SECTIONS = tuple(track.section for track in TRACKS.values() if track.section)


def get(track_id: str) -> Track:
    """The track named `track_id`; KeyError naming the choices when there is none."""
    try:
        return TRACKS[track_id]
    except KeyError:
        names = [repr(name) for name in TRACKS]
        raise KeyError(
            f"no track {track_id!r}: choose {', '.join(names[:-1])} or {names[-1]}"
        ) from None


def groups(levels: tuple[str, ...]) -> list[tuple[str, str, Track | None]]:
    """How a report groups items, in order: (the `level` field the group's items carry, its
    title, the track graded beside the levels or None): each of the rubric's `levels`, then
    each track graded beside them."""
    return [(level, level, None) for level in levels] + [
        (track.section, track.title, track) for track in TRACKS.values() if track.section
    ]
