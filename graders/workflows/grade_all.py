"""`kata grade-all` past its parsing: every submission under a folder graded
(graders.workflows.batch) with a progress bar, summary.csv and summary.md rewritten after each
grade, each grade's page written (pages/NNN.html, graders.formats.grade_page) and the index
linking them (index.html) rewritten, then the table.

cli.py parses the options and calls `survey`, `make_out` and `run` in turn. The first two check
before anything is graded and raise ValueError, one line saying why (OutputError for --out);
`run` raises SandboxUnavailable (bubblewrap required and not there) and OutputError (a summary
that can no longer be written: a full disk). Each is a usage error for the caller (exit 2).
Every path is absolute.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path, PurePosixPath

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

from graders.formats import grade_page
from graders.judge.request import GradeRequest
from graders.shared.output_files import (
    OutputError,
    check_writable,
    check_writable_folder,
    make_folder,
    write_atomically,
)
from graders.shared.tracks import Track
from graders.shared.untrusted import file_name
from graders.workflows import batch
from graders.workflows.grading import relative

SUMMARIES = ("summary.csv", "summary.md")
INDEX, PAGES = "index.html", "pages"  # the batch's page, and the folder of each grade's page


def survey(directory: Path, track: Track) -> tuple[list[batch.Submission], list[batch.Skipped]]:
    """The submissions under `directory` and what is skipped there (batch.survey); ValueError,
    saying why, when nothing is left to grade."""
    submissions, skipped = batch.survey(directory, track)
    if not submissions:
        why = (
            f" ({len(skipped)} skipped: {skipped[0].reason}{', ...' * (len(skipped) > 1)})"
            if skipped
            else ""
        )
        raise ValueError(
            f"no folder under {file_name(directory)} holds a {track.implementation}" + why
        )
    return submissions, skipped


def make_out(out: Path) -> tuple[Path, Path]:
    """The paths of summary.csv and summary.md in --out, once `out` is checked to be, or to be
    able to be made, a folder where both can be written, and then made. OutputError ("--out:
    ..."), and nothing created, when it cannot be."""
    try:
        check_writable_folder(out)
        for name in (*SUMMARIES, INDEX) if out.is_dir() else ():
            check_writable(out / name)
        make_folder(out)
    except OutputError as exc:
        raise OutputError(f"--out: {exc}") from None
    return out / SUMMARIES[0], out / SUMMARIES[1]


def run(
    console: Console,
    submissions: list[batch.Submission],
    skipped: list[batch.Skipped],
    summaries: tuple[Path, Path],
    settings: GradeRequest,
    jobs: int,
) -> None:
    """Grade `submissions`, `jobs` at once, each with `settings` (batch.grade_all), writing
    both `summaries` after each grade (so that a batch that is interrupted or fails keeps what
    it finished); then print the table."""
    from graders.judge.workers import warm_workers

    done, track = [], settings.track
    numbers = {submission.name: n for n, submission in enumerate(submissions, 1)}

    def finished(outcome) -> None:
        """Count the grade, and write the summaries, its page and the index of every grade so
        far."""
        done.append(outcome)
        batch.write_summary(done, *summaries, track, skipped)
        write_pages(outcome, done, skipped, summaries[0].parent, numbers, track)
        progress.advance(task)

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        disable=not console.is_terminal,
    ) as progress:
        task = progress.add_task("grading submissions", total=len(submissions))
        try:
            # Process-isolated workers fork from one warm process; each sandbox starts its own.
            with warm_workers() if settings.sandbox.resolve() == "process" else nullcontext():
                batch.grade_all(submissions, jobs, settings, on_done=finished)
        except (OSError, OutputError) as exc:  # a summary no longer writable (a full disk)
            reason = getattr(exc, "strerror", None) or exc
            raise OutputError(f"--out: cannot write the summary: {reason}") from None
    for line in batch.terminal_table(done, skipped):
        console.print(Text(line), soft_wrap=True)
    console.print(
        Text(f"wrote {relative(summaries[0].parent / INDEX)} (a page linking each grade's page)")
    )
    console.print(
        Text(f"wrote {relative(summaries[0])} and {relative(summaries[1])} (the full table)")
    )


def write_pages(
    outcome: batch.Outcome,
    done: list[batch.Outcome],
    skipped: list[batch.Skipped],
    out: Path,
    numbers: dict[str, int],
    track: Track,
) -> None:
    """Write `outcome`'s page (pages/NNN.html, NNN its submission's place in the survey: a
    name of the kata's, never the candidate's folder name) and the index of every grade
    `done` and every folder `skipped`."""
    entries = []
    for entry in sorted([*done, *skipped], key=lambda e: PurePosixPath(_name(e)).parts):
        if isinstance(entry, batch.Skipped) or entry.result is None:
            why = (
                f"not graded: {entry.reason}"
                if isinstance(entry, batch.Skipped)
                else "grading raised: summary.md has the error"
            )
            entries.append(
                grade_page.IndexEntry(file_name(_name(entry)), None, None, None, None, note=why)
            )
            continue
        result = entry.result
        best = max(result.similarity or [], key=lambda s: s["fraction"], default=None)
        entries.append(
            grade_page.IndexEntry(
                file_name(entry.submission.name),
                _page(numbers[entry.submission.name]),
                result.level,
                result.score,
                result.max_score,
                tuple(i.id for i in result.reported if not i.passed),
                tuple(t.id for t in result.tells if t.detected),
                f"{best['fraction']:.2f} {PurePosixPath(best['solution']).name}" if best else "",
                entry.seconds,
                "the grader itself broke on some item" if result.grader_broke else "",
            )
        )
    if outcome.result is not None:
        (out / PAGES).mkdir(exist_ok=True)
        shown = replace(
            outcome.result, implementation=f"{outcome.submission.name}/{track.implementation}"
        )
        grade_page.write_html(shown, out / _page(numbers[outcome.submission.name]))
    seed = next((o.result.seed for o in done if o.result is not None), None)
    write_atomically(out / INDEX, grade_page.index_page(entries, track, seed))


def _page(number: int) -> str:
    return f"{PAGES}/{number:03d}.html"


def _name(entry: batch.Outcome | batch.Skipped) -> str:
    return entry.name if isinstance(entry, batch.Skipped) else entry.submission.name
