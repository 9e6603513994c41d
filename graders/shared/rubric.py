"""The rubric, read from `rubric/rubric.toml`: what each item is worth and what a report says."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from graders.shared import bundled
from graders.shared.tracks import Track

RUBRIC_FILE = bundled.RUBRIC
# The level past L6 (contract section 8): its items are graded once L6 is reached, and their
# points are a score of their own (`plus_score`), outside the 100 of L4 to L6.
PLUS = "L6+"


@dataclass(frozen=True)
class Item:
    """`depends_on`: the items whose checks this one's cases rely on; a report gives this item's
    failure under theirs when they fail too (graders.formats.causes)."""

    id: str
    level: str
    points: float
    title: str
    checks: str
    hints: tuple[str, ...]
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class TellInfo:
    id: str
    caps: str
    title: str
    message: str


@dataclass(frozen=True)
class InterviewerItem:
    """A point no test can judge, for the interviewer to mark: asked aloud, and in `kata
    interview` at the stage of its `level` (contract section 7)."""

    id: str
    level: str
    prompt: str


@dataclass(frozen=True)
class Rubric:
    levels: tuple[str, ...]
    items: tuple[Item, ...]
    tells: tuple[TellInfo, ...]
    interviewer: tuple[InterviewerItem, ...]

    def item(self, item_id: str) -> Item:
        return next(i for i in self.items if i.id == item_id)

    def track(self, track: Track) -> tuple[Item, ...]:
        """The items of `track`, in rubric order."""
        return tuple(i for i in self.items if track.owns(i.level))

    def interviewer_of(self, track: Track) -> tuple[InterviewerItem, ...]:
        """The interviewer-only items a report of `track` lists: the track's own (the batching
        track's), or for a track with none of its own (serving) the levels'."""
        own = tuple(i for i in self.interviewer if track.owns(i.level))
        return own or tuple(i for i in self.interviewer if i.level in self.levels)

    def tell(self, tell_id: str) -> TellInfo:
        return next(t for t in self.tells if t.id == tell_id)


@cache
def load(path: Path = RUBRIC_FILE) -> Rubric:
    data = tomllib.loads(path.read_text())
    return Rubric(
        levels=tuple(data["levels"]),
        items=tuple(
            Item(
                d["id"],
                d["level"],
                float(d["points"]),
                d["title"],
                d["checks"],
                tuple(d["hints"]),
                tuple(d.get("depends_on", ())),
            )
            for d in data["item"]
        ),
        tells=tuple(TellInfo(d["id"], d["caps"], d["title"], d["message"]) for d in data["tell"]),
        interviewer=tuple(
            InterviewerItem(d["id"], d["level"], d["prompt"]) for d in data["interviewer"]
        ),
    )


def selected(track: Track, only: set[str] | None, up_to: str | None) -> list[Item]:
    """The track's items, in rubric order, narrowed to the ids in `only` and the levels up to
    `up_to` (a track without levels ignores `up_to`)."""
    rubric = load()
    return [
        i
        for i in rubric.track(track)
        if (only is None or i.id in only)
        and (
            up_to is None
            or not track.levels
            or rubric.levels.index(i.level) <= rubric.levels.index(up_to)
        )
    ]
