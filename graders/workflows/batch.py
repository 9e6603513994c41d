"""Grade many submissions at once: find them, grade them in parallel, summarise as CSV and Markdown.

Each `grade` call starts its own worker processes and judges with its own state, so grades in
different threads are independent; a thread pool is all the parallelism needed.

Everything under the folder given is the candidates': `survey` grades no file or folder that
resolves outside it (a kv_cache.py that links to a key, a folder that links to the user's home)
and names each one it skips, with the reason. Folder names and messages are candidate text:
every cell of summary.csv goes through `untrusted.csv_cell`, every candidate-derived cell of
summary.md through `untrusted.markdown_code`, and the terminal table shows names printable.
"""

from __future__ import annotations

import csv
import io
import os
import stat
import time
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable

from rich.cells import cell_len, set_cell_size

from graders.formats.report import STATUS_STYLE
from graders.judge.grade import draw_seed, grade
from graders.judge.result import GradeResult
from graders.judge.isolation import SandboxUnavailable
from graders.judge.request import GradeRequest
from graders.judge.workers import GradeWorkers
from graders.shared import rubric as rubric_data
from graders.shared.output_files import write_atomically
from graders.shared.tracks import DENSE, TESTS_ITEM, Track
from graders.shared.untrusted import clip, csv_cell, file_name, markdown_code

WIDTH = 80  # columns of the terminal table


@dataclass(frozen=True)
class Submission:
    name: str  # the folder relative to the root, POSIX-style; "." for the root itself
    implementation: Path
    tests: Path | None


@dataclass(frozen=True)
class Skipped:
    """Something under the root that looked like a submission and is not graded, and why."""

    name: str  # as Submission.name
    reason: str


@dataclass(frozen=True)
class Outcome:
    """A graded submission: `result`, or `error` when grading itself raised; `seconds` on the
    clock."""

    submission: Submission
    result: GradeResult | None = None
    error: str | None = None
    seconds: float = 0.0


def survey(root: Path, track: Track = DENSE) -> tuple[list[Submission], list[Skipped]]:
    """The submissions under `root` (see find_submissions), and what was skipped there, each
    sorted by relative path.

    Skipped, with the reason: a folder holding the track's file where that file or its test
    file is a symbolic link that resolves outside `root`, a link to nothing, or not a regular
    file (a FIFO, a device, a folder); a symbolic link to a folder outside `root` that holds the
    track's file (not followed); a folder that cannot be listed. A link that stays inside
    `root` is graded (a link to a folder inside is not followed: its target is graded under its
    own name). Nothing outside `root` is read: the links are resolved, never opened.
    """
    inside = Path(os.path.realpath(root))
    submissions, skipped = [], []
    folders = [root]
    while folders:
        folder = folders.pop()
        name = _name(root, folder)
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            skipped.append(Skipped(name, f"the folder cannot be listed: {exc.strerror}"))
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = folder / entry.name
            if entry.is_dir(follow_symlinks=False):
                folders.append(path)
            elif (
                entry.is_symlink()
                and entry.is_dir()
                and not _within(path, inside)
                and os.path.lexists(path / track.implementation)
            ):
                skipped.append(
                    Skipped(_name(root, path), "a link to a folder outside the folder graded")
                )
        if any(entry.name == track.implementation for entry in entries):
            found = _submission(name, folder, inside, track)
            (submissions if isinstance(found, Submission) else skipped).append(found)
    return (
        sorted(submissions, key=lambda found: _sort_key(found.name)),
        sorted(skipped, key=lambda found: _sort_key(found.name)),
    )


def find_submissions(root: Path, track: Track = DENSE) -> list[Submission]:
    """Every folder at or under `root` holding the track's candidate file (`kv_cache.py`,
    `paged_kv_cache.py`), sorted by relative path.

    Folders whose path has a part starting with "." (.git, .venv, ...) are skipped; symlinked
    folders are not followed, and what `survey` skips is left out. Tests are the track's test
    file (`test_kv_cache.py`) beside the implementation, if there is one; a track without
    own-tests has none.
    """
    return survey(root, track)[0]


def _submission(name: str, folder: Path, inside: Path, track: Track) -> Submission | Skipped:
    implementation = folder / track.implementation
    tests = folder / track.tests if track.tests else None
    has_tests = tests is not None and os.path.lexists(tests)
    for path in (implementation, *([tests] if has_tests else [])):
        refused = _refusal(path, inside)
        if refused:
            return Skipped(name, refused)
    return Submission(name, implementation, tests if has_tests else None)


def _refusal(path: Path, inside: Path) -> str | None:
    """Why the file at `path` may not be graded (a sentence), or None when it may."""
    if path.is_symlink() and not _within(path, inside):
        return f"{path.name} is a link to a file outside the folder graded"
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return (
            f"{path.name} is a link to nothing"
            if path.is_symlink()
            else (f"{path.name} cannot be read: {exc.strerror}")
        )
    return None if stat.S_ISREG(mode) else f"{path.name} is not a regular file"


def _within(path: Path, inside: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(inside)


def _name(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def grade_all(
    submissions: list[Submission],
    jobs: int,
    settings: GradeRequest,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Grade `submissions` with `jobs` threads; one Outcome each, in the submissions' order.

    Each is graded as `settings` says, on its own files (the request's are replaced); in a
    hidden run every submission meets the same hidden cases, drawn from the request's seed (a
    fresh one, drawn here, when it has none).
    `on_done(outcome)` is called in the calling thread as each grade finishes. A grade that
    raises becomes an Outcome with `error` and the others go on, except SandboxUnavailable
    (the sandbox asked for cannot run here, for any submission), which is raised. If the caller
    is interrupted (or `on_done` or a grade raises), grades not yet started are cancelled and
    running ones are waited for.
    """
    if settings.judged_hidden and settings.seed is None:
        settings = replace(settings, seed=draw_seed())
    outcomes: list[Outcome | None] = [None] * len(submissions)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kata-grade")
    try:
        futures = {
            pool.submit(
                _grade_one, replace(settings, implementation=s.implementation, tests=s.tests), s
            ): n
            for n, s in enumerate(submissions)
        }
        for future in as_completed(futures):
            outcome = outcomes[futures[future]] = future.result()
            if on_done:
                on_done(outcome)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _grade_one(request: GradeRequest, submission: Submission) -> Outcome:
    start = time.monotonic()
    try:
        result = grade(request, GradeWorkers.start(request))
        return Outcome(submission, result, seconds=time.monotonic() - start)
    except SandboxUnavailable:
        raise
    except Exception:
        return Outcome(
            submission,
            error="grading raised: " + traceback.format_exc(limit=-3),
            seconds=time.monotonic() - start,
        )


def write_summary(
    outcomes: list[Outcome],
    csv_path: Path,
    markdown_path: Path,
    track: Track = DENSE,
    skipped: list[Skipped] = (),
) -> None:
    """Write one row per outcome and per skipped folder, sorted by submission name, as CSV and
    as a Markdown table (each file replaced whole: a batch rewrites both after every grade).

    CSV columns: submission, level, score, max_score, plus_score (the L6+ points, outside the
    100; the dense track only), one per item id of `track` (its status;
    a `not_attempted` own-tests cell adds the reason: "not_attempted: no test file"), tells
    (detected tell ids, ";"-separated), similarity (of a hidden run: the highest fraction and
    its solution, "0.97 kv_cache.py"), seed (of a hidden run's cases), error. A grade whose
    grader broke says so in `error`; a grade that raised has only `error` filled; a skipped
    folder has "not graded: <reason>" there. Every cell is a `csv_cell`.
    Markdown: the same, statuses as PASS, FAIL, ERROR, TIMEOUT or TODO, the seed said once
    above the table, the error's last line; the submission, the reasons and the error are
    Markdown code spans (no link, image, HTML or cell of the candidate's).
    """
    item_ids = [item.id for item in rubric_data.load().track(track)]
    entries = sorted([*outcomes, *skipped], key=lambda e: _sort_key(_entry_name(e)))
    rows = [_row(entry, item_ids) for entry in entries]
    plus = ["plus_score"] if track.levels else []
    header = [
        "submission",
        "level",
        "score",
        "max_score",
        *plus,
        *item_ids,
        "tells",
        "similarity",
        "seed",
        "error",
    ]
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows([csv_cell(clip(row[h])) for h in header] for row in rows)
    write_atomically(csv_path, table.getvalue())

    seeds = sorted({row["seed"] for row in rows if row["seed"]})
    lines = (
        [f"Hidden cases of seed {', '.join(seeds)} (`--seed` replays them).", ""] if seeds else []
    )
    shown = [h for h in header if h != "seed"]  # said once, above the table
    lines += ["| " + " | ".join(shown) + " |", "|" + " --- |" * len(shown)]
    for row in rows:
        lines.append("| " + " | ".join(_markdown_cell(h, row[h], item_ids) for h in shown) + " |")
    write_atomically(markdown_path, "\n".join(lines) + "\n")


def terminal_table(outcomes: list[Outcome], skipped: list[Skipped] = ()) -> list[str]:
    """The batch in WIDTH columns, one line per submission sorted by name: submission, level,
    score, the ids of the items that did not pass, similarity (hidden runs), seconds; a skipped
    folder or a grade that raised says so after its name. Names are printable and cut to fit;
    summary.md has the full table."""
    columns = [
        ("submission", 16),
        ("level", 8),
        ("score", 5),
        ("not passing", 20),
        ("similarity", 16),
        ("time", 5),
    ]  # 80 columns with the gaps
    lines = ["  ".join(_fit(title, width) for title, width in columns).rstrip()]
    for entry in sorted([*outcomes, *skipped], key=lambda e: _sort_key(_entry_name(e))):
        name = _fit(file_name(_entry_name(entry)), columns[0][1])
        if isinstance(entry, Skipped) or entry.result is None:
            why = (
                f"not graded: {entry.reason}"
                if isinstance(entry, Skipped)
                else "grading raised: summary.md has the error"
            )
            lines.append(f"{name}  {_fit(why, WIDTH - columns[0][1] - 2)}".rstrip())
            continue
        result = entry.result
        failing = [item.id for item in result.reported if not item.passed]
        cells = [
            result.level or "partial",
            f"{result.score:g}",
            _listed(failing, columns[3][1]),
            _similarity(result),
            f"{entry.seconds:.0f}s",
        ]
        lines.append(
            "  ".join(
                [name, *(_fit(cell, width) for cell, (_, width) in zip(cells, columns[1:]))]
            ).rstrip()
        )
    return lines


def _fit(text: str, width: int) -> str:
    """`text` in `width` terminal columns (a wide character takes two): padded, or cut with an
    ellipsis."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, width - 1) + "…"


def _listed(ids: list[str], width: int) -> str:
    """As many of `ids` as fit in `width` columns, then how many more ("+3")."""
    for shown in range(len(ids), 0, -1):
        more = f" +{len(ids) - shown}" if shown < len(ids) else ""
        text = ", ".join(ids[:shown]) + more
        if len(text) <= width:
            return text
    return f"{len(ids)} items" if ids else ""


def _entry_name(entry: Outcome | Skipped) -> str:
    return entry.name if isinstance(entry, Skipped) else entry.submission.name


def _sort_key(name: str) -> tuple[str, ...]:
    return PurePosixPath(name).parts


def _row(entry: Outcome | Skipped, item_ids: list[str]) -> dict[str, str]:
    """The raw cells of one row, candidate text unescaped (each format escapes it)."""
    row = dict.fromkeys(
        [
            "level",
            "score",
            "max_score",
            "plus_score",
            *item_ids,
            "tells",
            "similarity",
            "seed",
            "error",
        ],
        "",
    )
    row["submission"] = file_name(_entry_name(entry))
    if isinstance(entry, Skipped):
        row["error"] = f"not graded: {entry.reason}"
        return row
    result = entry.result
    if result is None:
        row["error"] = entry.error or ""
        return row
    row.update(
        {
            "level": result.level or "",
            "score": f"{result.score:g}",
            "max_score": f"{result.max_score:g}",
            "plus_score": f"{result.plus_score:g}" if result.plus_started else "",
            "tells": ";".join(t.id for t in result.tells if t.detected),
            "similarity": _similarity(result),
            "seed": "" if result.seed is None else str(result.seed),
        }
    )
    row.update({item.id: _status(item) for item in result.items})
    if result.grader_broke:
        row["error"] = "the grader itself broke on some item: not the candidate's fault"
    return row


def _status(item) -> str:
    """An item's status; a not_attempted own-tests item adds why ("not_attempted: no test
    file"): the first clause of its message."""
    if item.id != TESTS_ITEM or item.status != "not_attempted":
        return item.status
    return f"{item.status}: {clip(item.message.split(': ')[0], 80)}"


def _similarity(result: GradeResult) -> str:
    """The highest fraction of GradeResult.similarity and its solution, "0.97 kv_cache.py";
    empty when the run measured none."""
    if not result.similarity:
        return ""
    best = max(result.similarity, key=lambda entry: entry["fraction"])
    return f"{best['fraction']:.2f} {PurePosixPath(best['solution']).name}"


def _markdown_cell(column: str, text: str, item_ids: list[str]) -> str:
    """A row's cell in summary.md: statuses as labels (a reason as a code span), tells as a
    list, the submission and the error's last line as code spans."""
    if not text:
        return ""
    if column in item_ids:
        status, _, reason = text.partition(": ")
        return STATUS_STYLE[status][0] + (f" {markdown_code(reason)}" if reason else "")
    if column == "tells":
        return text.replace(";", ", ")
    if column in ("submission", "error"):
        return markdown_code(
            clip((text.strip().splitlines() or [""])[-1] if column == "error" else text)
        )
    return text
