"""`kata grade-all` past its parsing: every submission under a folder graded
(graders.workflows.batch) with a progress bar, summary.csv and summary.md rewritten after each
grade, then the table.

cli.py parses the options and calls `survey`, `make_out` and `run` in turn. The first two check
before anything is graded and raise ValueError, one line saying why (OutputError for --out);
`run` raises SandboxUnavailable (bubblewrap required and not there) and OutputError (a summary
that can no longer be written: a full disk). Each is a usage error for the caller (exit 2).
Every path is absolute.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

from graders.judge.isolation import Sandbox
from graders.shared.output_files import (OutputError, check_writable, check_writable_folder,
                                         make_folder)
from graders.shared.tracks import Track
from graders.shared.untrusted import file_name
from graders.workflows import batch
from graders.workflows.grading import relative

SUMMARIES = ("summary.csv", "summary.md")


def survey(directory: Path, track: Track) -> tuple[list[batch.Submission], list[batch.Skipped]]:
    """The submissions under `directory` and what is skipped there (batch.survey); ValueError,
    saying why, when nothing is left to grade."""
    submissions, skipped = batch.survey(directory, track)
    if not submissions:
        why = (f" ({len(skipped)} skipped: {skipped[0].reason}{', ...' * (len(skipped) > 1)})"
               if skipped else "")
        raise ValueError(f"no folder under {file_name(directory)} holds a {track.implementation}"
                         + why)
    return submissions, skipped


def make_out(out: Path) -> tuple[Path, Path]:
    """The paths of summary.csv and summary.md in --out, once `out` is checked to be, or to be
    able to be made, a folder where both can be written, and then made. OutputError ("--out:
    ..."), and nothing created, when it cannot be."""
    try:
        check_writable_folder(out)
        for name in SUMMARIES if out.is_dir() else ():
            check_writable(out / name)
        make_folder(out)
    except OutputError as exc:
        raise OutputError(f"--out: {exc}") from None
    return out / SUMMARIES[0], out / SUMMARIES[1]


def run(console: Console, submissions: list[batch.Submission], skipped: list[batch.Skipped],
        summaries: tuple[Path, Path], track: Track, jobs: int, *, hidden: bool, timeout: float,
        import_timeout: float, sandbox: Sandbox, seed: int | None) -> None:
    """Grade `submissions`, `jobs` at once, writing both `summaries` after each grade (so that
    a batch that is interrupted or fails keeps what it finished); then print the table."""
    from graders.judge.workers import warm_workers

    done = []

    def finished(outcome) -> None:
        """Count the grade, and write the summaries of every grade so far."""
        done.append(outcome)
        batch.write_summary(done, *summaries, track, skipped)
        progress.advance(task)

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=console,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("grading submissions", total=len(submissions))
        try:
            # Process-isolated workers fork from one warm process; each sandbox starts its own.
            with warm_workers() if sandbox.resolve() == "process" else nullcontext():
                batch.grade_all(submissions, jobs, track=track, hidden=hidden, timeout=timeout,
                                import_timeout=import_timeout, sandbox=sandbox, seed=seed,
                                on_done=finished)
        except (OSError, OutputError) as exc:  # a summary no longer writable (a full disk)
            reason = getattr(exc, "strerror", None) or exc
            raise OutputError(f"--out: cannot write the summary: {reason}") from None
    for line in batch.terminal_table(done, skipped):
        console.print(Text(line), soft_wrap=True)
    console.print(Text(f"wrote {relative(summaries[0])} and {relative(summaries[1])} "
                       "(the full table)"))
