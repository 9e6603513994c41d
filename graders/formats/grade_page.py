"""A grade as an HTML page (`kata grade --html FILE`), and grade-all's index of such pages.

`grade_section` is the grade itself, shared with the interview's page (its final hidden grade):
the level and score with what capped it, the isolation and the hidden seed, then the items by
level, in each level the ones that do not pass first, each with its whole message (quoted:
graders.shared.untrusted.quote) and its hints folded in a <details>; the tells, detected first;
in a hidden run the similarity line and the interviewer's checklist. `index_page` lists a
batch's submissions, each linking its own page, sortable by level and by score.

Every message, name and id is text on the page (graders.formats.html.el escapes it): nothing
of the candidate's becomes markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graders.formats.html import Html, document, el, join
from graders.formats.report import PLUS_NOT_STARTED, partial_verdict, similarity_line
from graders.judge.result import GradeResult, ItemResult, TellResult
from graders.judge.isolation import PROCESS_FALLBACK_NOTE
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.output_files import write_atomically
from graders.shared.untrusted import quote

STATUS_LABEL = {
    "pass": "PASS",
    "fail": "FAIL",
    "error": "ERROR",
    "timeout": "TIMEOUT",
    "not_attempted": "TODO",
}
NAME_CHARS = 200  # of the implementation's name in the page's title: it can be the candidate's
ISOLATION = {"bwrap": "bubblewrap sandbox", "process": "process fallback (no sandbox)"}


def write_html(result: GradeResult, path: Path) -> None:
    """Write the page of `result` to `path`."""
    write_atomically(path, page(result))


def page(result: GradeResult) -> str:
    """The whole page of one grade."""
    name = quote(result.implementation, NAME_CHARS)
    body = join(el("h1", "kvkata grade: ", el("code", name)), grade_section(result))
    return document(f"kvkata grade: {name}", body)


def grade_section(result: GradeResult) -> Html:
    """The grade's summary, its items by level (failures first), its tells and, in a hidden
    run, the similarity and the interviewer's checklist."""
    rubric = rubric_data.load()
    track = tracks.get(result.track)
    parts = [_summary(result)]
    for level, title, _ in tracks.groups(rubric.levels):
        items = [i for i in result.items if i.level == level]
        if items and level == rubric_data.PLUS and not result.plus_started:
            parts.append(el("h3", f"{title}: {PLUS_NOT_STARTED}"))
        elif items:
            parts.append(_level(title, items, rubric))
    if track.levels and result.tells:
        parts.append(_tells(result.tells, rubric))
    if result.hidden:
        parts.append(el("h3", "For the interviewer to mark (no test can judge these)"))
        parts.append(
            el(
                "ul",
                [el("li", "\u2610 ", item.prompt) for item in rubric.interviewer_of(track)],
                cls="checklist",
            )
        )
    return join(parts)


def _summary(result: GradeResult) -> Html:
    verdict = (
        ("Partial run", partial_verdict(result.items))
        if result.partial
        else ("Level" if tracks.get(result.track).levels else "Track", result.level or "none")
    )
    facts = [verdict, ("Score", f"{result.score:g}/{result.max_score:g}")]
    if result.plus_started:
        facts.append(
            (rubric_data.PLUS, f"{result.plus_score:g}/{result.plus_max_score:g} (outside the 100)")
        )
    if result.capped_by:
        facts.append(("Capped by", ", ".join(result.capped_by)))
    if result.hidden:
        facts.append(("Hidden cases", f"seed {result.seed} (--seed {result.seed} replays them)"))
    facts.append(("Isolation", ISOLATION.get(result.isolation, str(result.isolation))))
    notes = []
    if result.similarity:
        notes.append(el("p", similarity_line(result.similarity)))
    if result.isolation == "process" and result.hidden:
        notes.append(el("p", PROCESS_FALLBACK_NOTE, cls="dim"))
    if result.unavailable:
        notes.append(
            el("p", el("b", "Items not run: "), el("span", quote(result.unavailable), cls="msg"))
        )
    if result.grader_broke:
        notes.append(
            el(
                "p",
                el("b", "The grader itself broke on some item: not the candidate's fault."),
                cls="fail",
            )
        )
    return join(
        el("ul", [el("li", el("b", name), value) for name, value in facts], cls="facts"), notes
    )


def _level(title: str, items: list[ItemResult], rubric: rubric_data.Rubric) -> Html:
    earned = sum(i.points for i in items)
    total = sum(i.max_points for i in items)
    rows = [_item_row(item, rubric) for item in sorted(items, key=lambda i: i.status == "pass")]
    return join(
        el("h3", f"{title} ({earned:g}/{total:g} points)"),
        el(
            "table",
            el(
                "thead",
                el(
                    "tr",
                    el("th", "status"),
                    el("th", "item"),
                    el("th", "points", cls="num"),
                    el("th", "why"),
                ),
            ),
            el("tbody", rows),
            cls="items",
        ),
    )


def _item_row(item: ItemResult, rubric: rubric_data.Rubric) -> Html:
    known = rubric.item(item.id) if item.id in {i.id for i in rubric.items} else None
    why = [el("div", quote(item.message), cls="msg")] if item.message else []
    if known and item.status != "pass" and not item.unavailable and known.hints:
        why.append(
            el(
                "details",
                el("summary", f"hints ({len(known.hints)} steps)"),
                el("ol", [el("li", hint) for hint in known.hints]),
            )
        )
    return el(
        "tr",
        el(
            "td",
            el(
                "span",
                STATUS_LABEL.get(item.status, item.status),
                cls=f"badge {_status_class(item.status)}",
            ),
        ),
        el("td", el("code", item.id), el("div", known.title, cls="dim") if known else None),
        el("td", f"{item.points:g}/{item.max_points:g}", cls="num"),
        el("td", why),
        id=f"item-{item.id}",
    )


def _tells(tells: list[TellResult], rubric: rubric_data.Rubric) -> Html:
    known = {t.id: t for t in rubric.tells}
    rows = []
    for tell in sorted(tells, key=lambda t: (not t.detected, not t.checked)):
        info = known.get(tell.id)
        if tell.detected:
            label, cls = "DETECTED", "fail"
        elif tell.checked:
            label, cls = "clear", "pass"
        else:
            label, cls = "not checked", "unknown"
        caps = f" (caps the level at {info.caps})" if info and tell.detected else ""
        rows.append(
            el(
                "tr",
                el("td", el("span", label, cls=f"badge {cls}")),
                el(
                    "td",
                    el("code", tell.id),
                    caps,
                    el("div", info.title, cls="dim") if info else None,
                ),
                el("td", el("div", quote(tell.message), cls="msg")),
            )
        )
    return join(
        el("h3", "Down-level tells"),
        el(
            "table",
            el("thead", el("tr", el("th", "status"), el("th", "tell"), el("th", "why"))),
            el("tbody", rows),
            cls="tells",
        ),
    )


def _status_class(status: str) -> str:
    return status if status in STATUS_LABEL else "unknown"


def result_from_json(data: dict, track: str) -> GradeResult:
    """A grade back from the contract's JSON (graders.formats.report.to_json), as a session's
    record keeps its final grade: what the JSON does not carry (the caps, whether each tell
    was checked) is left at its default. ValueError, one line, for JSON that is not a grade."""
    try:
        return GradeResult(
            implementation=str(data["implementation"]),
            level=data["level"],
            items=[
                ItemResult(
                    str(i["id"]),
                    str(i["level"]),
                    str(i["status"]),
                    float(i["points"]),
                    float(i["max_points"]),
                    str(i["message"]),
                )
                for i in data["items"]
            ],
            tells=[
                TellResult(str(t["id"]), bool(t["detected"]), str(t["message"]))
                for t in data["tells"]
            ],
            hidden=bool(data["hidden"]),
            track=track,
            isolation=data.get("isolation"),
            partial=bool(data.get("partial")),
            seed=data.get("seed"),
            similarity=data.get("similarity"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"the final grade is not one the kata wrote ({type(exc).__name__}: "
            f"{quote(str(exc), 200)})"
        ) from None


@dataclass(frozen=True)
class IndexEntry:
    """One submission of a batch on its index page: its name, the page of its grade (a path
    relative to the index; None when it was not graded), and what the table shows. `level` is
    None for a grade that did not happen (then `note` says why)."""

    name: str
    page: str | None
    level: str | None
    score: float | None
    max_score: float | None
    failing: tuple[str, ...] = ()
    tells: tuple[str, ...] = ()
    similarity: str = ""
    seconds: float | None = None
    note: str = ""


def index_page(entries: list[IndexEntry], track: tracks.Track, seed: int | None) -> str:
    """The batch's index: a row a submission, linking its page; sortable by level and by
    score (with JavaScript; without it, in the order given)."""
    head = el(
        "tr",
        el("th", "submission"),
        el("th", "level", data_sort="level", title="sort by level"),
        el("th", "score", cls="num", data_sort="score", title="sort by score"),
        el("th", "not passing"),
        el("th", "tells"),
        el("th", "similarity"),
        el("th", "time", cls="num"),
    )
    rows = [_index_row(entry, track) for entry in entries]
    lead = [
        el("p", f"Hidden cases of seed {seed} (--seed {seed} replays them).")
        if seed is not None
        else None,
        el(
            "p",
            f"{len(entries)} submissions, track {track.id}. Click level or score to sort.",
            cls="dim",
        ),
    ]
    body = join(
        el("h1", "kvkata grade-all"),
        lead,
        el("table", el("thead", head), el("tbody", rows), cls="index"),
    )
    return document("kvkata grade-all", body)


def _index_row(entry: IndexEntry, track: tracks.Track) -> Html:
    name = el("a", entry.name, href=entry.page) if entry.page else el("span", entry.name)
    score = "" if entry.score is None else f"{entry.score:g}/{entry.max_score:g}"
    return el(
        "tr",
        el("td", el("code", name), el("div", entry.note, cls="msg") if entry.note else None),
        el("td", entry.level or ("partial" if entry.score is not None else "-")),
        el("td", score, cls="num"),
        el("td", ", ".join(entry.failing)),
        el("td", ", ".join(entry.tells)),
        el("td", entry.similarity),
        el("td", "" if entry.seconds is None else f"{entry.seconds:.0f}s", cls="num"),
        data_level=level_rank(entry.level, track),
        data_score=-1 if entry.score is None else entry.score,
    )


def level_rank(level: str | None, track: tracks.Track) -> int:
    """A level's place for sorting: 0 for none reached ("below L4", "none"), then each of the
    track's levels in order; -1 for no level (a partial run, a grade that failed) or one the
    rubric does not know."""
    order = ["below L4", *rubric_data.load().levels] if track.levels else ["none", track.section]
    return order.index(level) if level in order else -1
