"""Grade many submissions at once: find them, grade them in parallel, summarise as CSV and Markdown.

Each `grade` call starts its own worker processes and judges with its own state, so grades in
different threads are independent; a thread pool is all the parallelism needed.
"""

from __future__ import annotations

import csv
import io
import traceback
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from graders import rubric as rubric_data
from graders.grade import DEFAULT_IMPORT_TIMEOUT, DEFAULT_TIMEOUT, GradeResult, draw_seed, grade
from graders.isolation import Sandbox, SandboxUnavailable
from graders.output_files import write_atomically
from graders.formats.report import STATUS_STYLE
from graders.tracks import DENSE, Track



@dataclass(frozen=True)
class Submission:
    name: str  # the folder relative to the root, POSIX-style; "." for the root itself
    implementation: Path
    tests: Path | None


@dataclass(frozen=True)
class Outcome:
    """A graded submission: `result`, or `error` when grading itself raised."""

    submission: Submission
    result: GradeResult | None = None
    error: str | None = None


def find_submissions(root: Path, track: Track = DENSE) -> list[Submission]:
    """Every folder at or under `root` holding the track's candidate file (`kv_cache.py`,
    `paged_kv_cache.py`), sorted by relative path.

    Folders whose path has a part starting with "." (.git, .venv, ...) are skipped; symlinked
    folders are not followed. Tests are the track's test file (`test_kv_cache.py`) beside the
    implementation, if a file; a track without own-tests has none.
    """
    submissions = []
    for implementation in root.rglob(track.implementation):
        folder = implementation.parent.relative_to(root)
        if not implementation.is_file() or any(p.startswith(".") for p in folder.parts):
            continue
        tests = implementation.with_name(track.tests) if track.tests else None
        submissions.append(Submission(folder.as_posix(), implementation,
                                      tests if tests and tests.is_file() else None))
    return sorted(submissions, key=lambda s: _sort_key(s.name))


def grade_all(submissions: list[Submission], jobs: int, *, track: Track = DENSE,
              hidden: bool = False, timeout: float = DEFAULT_TIMEOUT,
              import_timeout: float = DEFAULT_IMPORT_TIMEOUT, sandbox: Sandbox = Sandbox(),
              seed: int | None = None,
              on_done: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Grade `submissions` with `jobs` threads; one Outcome each, in the submissions' order.

    `track` (by its id), `hidden`, `timeout`, `import_timeout` and `sandbox` are passed to every
    `grade`; in a hidden run every submission meets the same hidden cases, drawn from `seed` (a
    fresh one when None).
    `on_done(outcome)` is called in the calling thread as each grade finishes. A grade that
    raises becomes an Outcome with `error` and the others go on, except SandboxUnavailable
    (the sandbox asked for cannot run here, for any submission), which is raised. If the caller
    is interrupted (or `on_done` or a grade raises), grades not yet started are cancelled and
    running ones are waited for.
    """
    options = {"track": track.id, "hidden": hidden, "timeout": timeout,
               "import_timeout": import_timeout,
               "sandbox": sandbox, "seed": (draw_seed() if seed is None else seed) if hidden else None}
    outcomes: list[Outcome | None] = [None] * len(submissions)
    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kata-grade")
    try:
        futures = {pool.submit(_grade_one, s, options): n for n, s in enumerate(submissions)}
        for future in as_completed(futures):
            outcome = outcomes[futures[future]] = future.result()
            if on_done:
                on_done(outcome)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return outcomes


def _grade_one(submission: Submission, options: dict) -> Outcome:
    try:
        return Outcome(submission, grade(submission.implementation, submission.tests, **options))
    except SandboxUnavailable:
        raise
    except Exception:
        return Outcome(submission, error="grading raised: " + traceback.format_exc(limit=-3))


def write_summary(outcomes: list[Outcome], csv_path: Path, markdown_path: Path,
                  track: Track = DENSE) -> None:
    """Write one row per outcome, sorted by submission name, as CSV and as a Markdown table.

    CSV columns: submission, level, score, max_score, one per item id of `track` (its status),
    tells (detected tell ids, ";"-separated), seed (of a hidden run's cases), error. Markdown: the
    same, statuses as PASS, FAIL, ERROR, TIMEOUT or TODO. A grade whose grader broke says so in
    `error`; a grade that raised has only `error` filled.
    """
    item_ids = [item.id for item in rubric_data.load().track(track)]
    rows = [_row(o, item_ids) for o in sorted(outcomes, key=lambda o: _sort_key(o.submission.name))]
    header = ["submission", "level", "score", "max_score", *item_ids, "tells", "seed", "error"]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=header)
    writer.writeheader()
    writer.writerows(rows)
    write_atomically(csv_path, table.getvalue())

    seeds = sorted({row["seed"] for row in rows if row["seed"]})
    lines = [f"Hidden cases of seed {', '.join(seeds)} (`--seed` replays them).", ""] if seeds else []
    shown = [h for h in header if h != "seed"]  # said once, above the table
    lines += ["| " + " | ".join(shown) + " |", "|" + " --- |" * len(shown)]
    for row in rows:
        cells = {**row, **{i: STATUS_STYLE[row[i]][0] for i in item_ids if row[i]},
                 "tells": row["tells"].replace(";", ", "),
                 "error": row["error"].strip().splitlines()[-1] if row["error"] else ""}
        lines.append("| " + " | ".join(_md_cell(cells[h]) for h in shown) + " |")
    write_atomically(markdown_path, "\n".join(lines) + "\n")


def _sort_key(name: str) -> tuple[str, ...]:
    return PurePosixPath(name).parts


def _row(outcome: Outcome, item_ids: list[str]) -> dict[str, str]:
    row = dict.fromkeys(["level", "score", "max_score", *item_ids, "tells", "seed", "error"], "")
    row["submission"] = outcome.submission.name
    result = outcome.result
    if result is None:
        row["error"] = outcome.error or ""
        return row
    row.update({"level": result.level, "score": f"{result.score:g}",
                "max_score": f"{result.max_score:g}",
                "tells": ";".join(t.id for t in result.tells if t.detected),
                "seed": "" if result.seed is None else str(result.seed)})
    row.update({item.id: item.status for item in result.items})
    if result.grader_broke:
        row["error"] = "the grader itself broke on some item: not the candidate's fault"
    return row


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
