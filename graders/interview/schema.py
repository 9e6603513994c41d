"""The record's schema: what `DIR/.kata/session.json` may hold (contract section 7), checked
where a record is read (graders.interview.session.load), before any verb, report or replay uses
a field of it.

A record is the candidate's file: anyone can edit it. A record that fails the schema is one
RecordError, one line naming the field and what it holds (printable), never a traceback further
on. What is known is read from where it is defined, never listed here: the tracks
(graders.shared.tracks), their stages and the levels a save reaches (the caller's `stages` and
`levels`: graders.interview.session's), the item, tell and level ids (the rubric's data), the
solutions `kata solution` shows (graders.workflows.solutions). A level or item added to the
rubric (L6+, say) is a known one at once.

The schema checks types, ranges and names; whether the record's claims are true (a save's level,
a snapshot's files) is graders.interview.verify's.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Callable, Sequence

from graders.interview.record import SNAPSHOT, VERSION
from graders.shared.tracks import Track
from graders.shared.untrusted import quote

STATUSES = ("pass", "fail", "error", "timeout", "not_attempted")  # contract section 3
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # whole (fullmatch)
MAX_SHOWN = 80  # characters of a wrong value a RecordError quotes
# The fields of a record and of each kind of event, in the contract's order.
RECORD_FIELDS = (
    "version",
    "track",
    "minutes",
    "strict",
    "started",
    "ended",
    "stage",
    "events",
    "final",
)
EVENT_FIELDS = {
    "save": ("t", "kind", "snapshot", "level", "score", "passing"),
    "hint": ("t", "kind", "item", "step"),
    "stage": ("t", "kind", "stage"),
    "solution": ("t", "kind", "item"),
    "refused": ("t", "kind", "what", "item"),
}
# The fields of `final` (the contract's grade JSON) the report reads; the grade JSON may grow.
FINAL_FIELDS = (
    "implementation",
    "level",
    "score",
    "max_score",
    "items",
    "tells",
    "hidden",
    "partial",
    "seed",
)


class RecordError(ValueError):
    """A record that is not one the kata wrote: one line, naming the field."""


Names = Callable[[Track], Sequence[str]]


def check(data: object, where: str, stages: Names, levels: Names) -> dict:
    """`data` (the parsed JSON of the record at `where`), when it is a record; else RecordError
    "<where>: <field>: <what is wrong>". `stages(track)` and `levels(track)` are the stages a
    session of the track opens and the levels its saves reach."""
    try:
        _record(data, stages, levels)
    except _Wrong as wrong:
        raise RecordError(f"{quote(where)}: {wrong.field}: {wrong.problem}") from None
    return data


class _Wrong(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field, self.problem = field, problem


def _record(data: object, stages: Names, levels: Names) -> None:
    from graders.shared import tracks

    record = _fields(data, "the record", RECORD_FIELDS)
    if record["version"] != VERSION:
        raise _Wrong("version", f"{_shown(record['version'])}: not a version {VERSION} record")
    track_id = _text(record["track"], "track")
    if track_id not in tracks.TRACKS:
        raise _Wrong("track", _one_of(track_id, tracks.TRACKS))
    known = _Known(tracks.get(track_id), stages, levels)
    _number(record["minutes"], "minutes", above=0)
    _boolean(record["strict"], "strict")
    started = _time(record["started"], "started")
    if record["ended"] is not None and _time(record["ended"], "ended") < started:
        raise _Wrong("ended", f"{_shown(record['ended'])} is before `started`")
    _choice(record["stage"], "stage", known.stages)
    if not isinstance(record["events"], list):
        raise _Wrong("events", f"{_type(record['events'])}, not a list")
    for n, event in enumerate(record["events"]):
        _event(event, f"events[{n}]", known)
    if record["final"] is not None:
        _final(record["final"], "final", known)
    if (record["final"] is None) != (record["ended"] is None):
        raise _Wrong("final", "a session has a final grade exactly when it has ended")


class _Known:
    """What a record of `track` may name: its stages, levels, items, tells, and the hints and
    solutions `kata hint` and `kata solution` take."""

    def __init__(self, track: Track, stages: Names, levels: Names) -> None:
        from graders.shared import rubric as rubric_data
        from graders.workflows.solutions import SOLUTIONS

        rubric = rubric_data.load()
        self.track = track
        self.stages = tuple(stages(track))
        self.levels = tuple(levels(track))
        self.items = {item.id: item for item in rubric.track(track)}
        self.hint_items = tuple(item.id for item in rubric.items)  # `kata hint` takes any
        self.tells = tuple(tell.id for tell in rubric.tells)
        self.solutions = tuple(SOLUTIONS)
        self.max_score = sum(item.points for item in self.items.values())


def _event(data: object, field: str, known: _Known) -> None:
    kind = _fields(data, field, ("kind",), exact=False)["kind"]
    _choice(kind, f"{field}.kind", tuple(EVENT_FIELDS))
    event = _fields(data, field, EVENT_FIELDS[kind])
    _number(event["t"], f"{field}.t", at_least=0)
    if kind == "save":
        if not SNAPSHOT.fullmatch(_text(event["snapshot"], f"{field}.snapshot")):
            raise _Wrong(
                f"{field}.snapshot",
                f"{_shown(event['snapshot'])}: not a snapshot's name (NNN-<8 hex digits>)",
            )
        _choice(event["level"], f"{field}.level", known.levels)
        _number(event["score"], f"{field}.score", at_least=0, at_most=known.max_score)
        _ids(event["passing"], f"{field}.passing", tuple(known.items))
    elif kind == "hint":
        _choice(event["item"], f"{field}.item", known.hint_items)
        _integer(event["step"], f"{field}.step", at_least=1)
    elif kind == "stage":
        _choice(event["stage"], f"{field}.stage", known.stages)
    elif kind == "solution":
        _solution(event["item"], f"{field}.item", known)
    else:
        what = _choice(event["what"], f"{field}.what", ("hint", "solution"))
        if what == "hint":
            _choice(event["item"], f"{field}.item", known.hint_items)
        else:
            _solution(event["item"], f"{field}.item", known)


def _solution(value: object, field: str, known: _Known) -> None:
    """A solution asked: a step's name, "FROM -> TO" (a diff of two) or "readme" (cli.py)."""
    text = _text(value, field)
    names = text.split(" -> ") if " -> " in text else [text]
    if (
        len(names) > 2
        or not all(name in (*known.solutions, "readme") for name in names)
        or (len(names) == 2 and "readme" in names)
    ):
        raise _Wrong(
            field,
            f"{_shown(text)}: not a solution `kata solution` shows (a step of "
            f"{', '.join(known.solutions)}; FROM -> TO; readme)",
        )


def _final(data: object, field: str, known: _Known) -> None:
    final = _fields(data, field, FINAL_FIELDS, exact=False)
    implementation = _text(final["implementation"], f"{field}.implementation")
    folder, _, name = implementation.partition("/")
    if not SNAPSHOT.fullmatch(folder) or name != known.track.implementation:
        raise _Wrong(
            f"{field}.implementation",
            f"{_shown(implementation)}: not a snapshot's "
            f"file (NNN-<8 hex digits>/{known.track.implementation})",
        )
    partial = _boolean(final["partial"], f"{field}.partial")
    _boolean(final["hidden"], f"{field}.hidden")
    if partial:
        if final["level"] is not None:
            raise _Wrong(f"{field}.level", f"{_shown(final['level'])}: a partial grade has none")
    else:
        _choice(final["level"], f"{field}.level", known.levels)
    max_score = _number(
        final["max_score"], f"{field}.max_score", at_least=0, at_most=known.max_score
    )
    _number(final["score"], f"{field}.score", at_least=0, at_most=max_score)
    if final["seed"] is not None:
        _integer(final["seed"], f"{field}.seed", at_least=0)
    if not isinstance(final["items"], list):
        raise _Wrong(f"{field}.items", f"{_type(final['items'])}, not a list")
    seen = set()
    for n, item in enumerate(final["items"]):
        where = f"{field}.items[{n}]"
        entry = _fields(
            item, where, ("id", "level", "status", "points", "max_points", "message"), exact=False
        )
        item_id = _choice(entry["id"], f"{where}.id", tuple(known.items))
        if item_id in seen:
            raise _Wrong(f"{where}.id", f"{item_id} is listed twice")
        seen.add(item_id)
        if entry["level"] != known.items[item_id].level:
            raise _Wrong(
                f"{where}.level",
                f"{_shown(entry['level'])}: {item_id}'s level is {known.items[item_id].level}",
            )
        _choice(entry["status"], f"{where}.status", STATUSES)
        top = _number(
            entry["max_points"],
            f"{where}.max_points",
            at_least=0,
            at_most=known.items[item_id].points,
        )
        _number(entry["points"], f"{where}.points", at_least=0, at_most=top)
        _text(entry["message"], f"{where}.message")
    if not isinstance(final["tells"], list):
        raise _Wrong(f"{field}.tells", f"{_type(final['tells'])}, not a list")
    for n, tell in enumerate(final["tells"]):
        where = f"{field}.tells[{n}]"
        entry = _fields(tell, where, ("id", "detected", "message"), exact=False)
        _choice(entry["id"], f"{where}.id", known.tells)
        _boolean(entry["detected"], f"{where}.detected")
        _text(entry["message"], f"{where}.message")
    similarity = final.get("similarity")
    if similarity is not None:
        if not isinstance(similarity, list):
            raise _Wrong(f"{field}.similarity", f"{_type(similarity)}, not a list")
        for n, entry in enumerate(similarity):
            where = f"{field}.similarity[{n}]"
            entry = _fields(entry, where, ("solution", "fraction"), exact=False)
            _text(entry["solution"], f"{where}.solution")
            _number(entry["fraction"], f"{where}.fraction", at_least=0, at_most=1)
    isolation = final.get("isolation")
    if isolation is not None:
        _text(isolation, f"{field}.isolation")


def _fields(data: object, field: str, names: tuple[str, ...], exact: bool = True) -> dict:
    """`data` as an object holding every field of `names` (and, `exact`, no other)."""
    if not isinstance(data, dict):
        raise _Wrong(field, f"{_type(data)}, not an object")
    missing = [name for name in names if name not in data]
    if missing:
        raise _Wrong(field, f"no field {missing[0]!r}")
    unknown = [name for name in data if name not in names] if exact else []
    if unknown:
        raise _Wrong(field, f"an unknown field {_shown(unknown[0])}")
    return data


def _text(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise _Wrong(field, f"{_type(value)}, not a string")
    return value


def _boolean(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise _Wrong(field, f"{_shown(value)}: not true or false")
    return value


def _number(
    value: object,
    field: str,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Wrong(field, f"{_shown(value)}: not a number")
    if (
        (at_least is not None and value < at_least)
        or (above is not None and value <= above)
        or (at_most is not None and value > at_most)
    ):
        bounds = [
            f">= {at_least:g}" if at_least is not None else "",
            f"> {above:g}" if above is not None else "",
            f"<= {at_most:g}" if at_most is not None else "",
        ]
        raise _Wrong(field, f"{_shown(value)}: not {' and '.join(b for b in bounds if b)}")
    return value


def _integer(value: object, field: str, *, at_least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Wrong(field, f"{_shown(value)}: not a whole number")
    if value < at_least:
        raise _Wrong(field, f"{value}: not >= {at_least}")
    return value


def _choice(value: object, field: str, choices) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _Wrong(field, _one_of(value, choices))
    return value


def _ids(value: object, field: str, choices: tuple[str, ...]) -> None:
    if not isinstance(value, list):
        raise _Wrong(field, f"{_type(value)}, not a list")
    for n, item in enumerate(value):
        _choice(item, f"{field}[{n}]", choices)
    if len(set(value)) < len(value):
        raise _Wrong(field, "an item listed twice")


def _time(value: object, field: str) -> float:
    """A UTC time as the record writes it ("2026-12-02T10:00:00Z"), in seconds."""
    from datetime import timezone

    text = _text(value, field)
    try:
        if not TIME.fullmatch(text):
            raise ValueError
        return (
            datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
        )
    except ValueError:
        raise _Wrong(field, f"{_shown(text)}: not a UTC time (2026-12-02T10:00:00Z)") from None


def _one_of(value: object, choices) -> str:
    names = list(choices)
    listed = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return f"{_shown(value)}: not one of {listed}"


def _shown(value: object) -> str:
    """A wrong value as an error shows it: its JSON-ish repr, printable, on one line, cut."""
    return quote(repr(value), limit=MAX_SHOWN).replace("\n", "\\n")


def _type(value: object) -> str:
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "true or false",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
