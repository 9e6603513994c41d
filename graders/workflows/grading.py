"""`kata grade` past its parsing: one grade shown in the terminal and written to the files asked
for (`grade`); with --watch, the same grade again at each save, the next one's workers started
while the files are edited (`watch`).

cli.py parses the options into a GradeRequest and Outputs, refuses (exit 2) what it cannot use,
and calls `grade` or `watch`, whose return is the exit code: the grade's
(GradeResult.exit_code), or an output file's that could not be written (graders.formats.outputs),
whichever is higher. SandboxUnavailable (bubblewrap required and not there) is raised to the
caller, for which it is a usage error. Every path is absolute.

Nothing here imports torch on import: a grade starts its workers first, so that their torch
imports overlap this process's own import of the judge.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

from graders.judge.request import GradeRequest
from graders.shared import tracks
from graders.shared.output_files import STDOUT
from graders.shared.untrusted import file_name
from graders.workflows import last_failed

if TYPE_CHECKING:  # graders.judge.workers imports torch: a grade starts its workers first
    from graders.judge.result import ItemResult
    from graders.judge.workers import GradeWorkers

# make_console() prints to standard output, make_console(stderr=True) to standard error (cli.py's
# _console: text the terminal's encoding cannot show is replaced).
Consoles = Callable[..., Console]
# --ff (and --watch) grade first, --lf only, the items the last grade did not pass; "none" for
# every other grade (a hidden one keeps no record).
Follow = Literal["none", "failed-first", "last-failed"]


@dataclass(frozen=True)
class Outputs:
    """How a grade is shown and written: `shown` is how the report names the implementation,
    `command` how to grade it again, `detail` the report's (graders.formats.report.render);
    the files asked for (None: not written; graders.shared.output_files.STDOUT: standard
    output), `output_format` the JSON's ("kata" or "gradescope")."""

    shown: str
    command: str
    detail: str = "default"
    json_path: Path | None = None
    output_format: str = "kata"
    markdown: Path | None = None
    junit: Path | None = None
    html: Path | None = None


def relative(path: Path) -> str:
    """`path` (absolute) relative to the folder the command runs in when it is inside it, shown
    printable: a folder may be named by a candidate (graders.shared.untrusted.file_name)."""
    return file_name(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


def check_private_graders(folder: Path, track: tracks.Track) -> None:
    """--graders FOLDER: a folder whose every grader file can be used on `track`, checked before
    anything is graded; ValueError, one line naming the file and the problem, when not."""
    if not folder.is_dir():
        raise ValueError(f"--graders {folder} is not a folder")
    from graders.judge.grade import PrivateGraderError, private_graders

    try:
        private_graders(folder, track)
    except PrivateGraderError as exc:
        raise ValueError(f"--graders: {exc}") from None


def grade(
    make_console: Consoles,
    request: GradeRequest,
    outputs: Outputs,
    follow: Follow = "none",
    workers: GradeWorkers | None = None,
    verdicts: Verdicts | None = None,
) -> int:
    """One grade, from `request` to written outputs: the items the record says to run
    (graders.workflows.last_failed, by `follow`), the workers started (or `workers`, started
    ahead, when they fit), the judge, the record of what did not pass, a line naming the files
    and the note of the record (not for the "quiet" and "brief" details), the report, the
    files asked for. `verdicts` (a --watch's): the results it keeps for the file as it is now
    are taken as they are, and it hears of each item as the grade ends it."""
    from graders.judge.workers import GradeWorkers

    selection = _selection(request, follow)
    request = selection.apply(request)
    kept = verdicts.kept(request.implementation) if verdicts else {}
    # The workers first: each imports torch while this process imports the judge, which does too.
    workers = _fitting(workers, request) or GradeWorkers.start(request)
    from graders.formats import report
    from graders.formats.outputs import write_outputs
    from graders.judge.grade import grade as judge

    # A report written to standard output (-) has it alone: the terminal's report goes to stderr.
    files = (outputs.json_path, outputs.markdown, outputs.junit, outputs.html)
    console = make_console(stderr=STDOUT in files)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task(f"grading {outputs.shown}", total=None)

        def advance(item) -> None:
            progress.update(task, advance=1, description=f"graded {item.id}")
            if verdicts:
                verdicts.hear(item)

        result = replace(
            judge(request, workers, on_item=advance, kept=kept), implementation=outputs.shown
        )

    last_failed.record(request.implementation, result)
    if outputs.detail not in ("quiet", "brief"):
        tests = request.tests
        console.print(
            Text.assemble(
                ("kata grade ", "bold"),
                relative(request.implementation),
                f"  (tests: {relative(tests)})" if tests else "  (no test file)",
            )
        )
        if selection.note:
            console.print(Text(selection.note, style="dim"))
    report.render(result, console, outputs.detail, outputs.command, first=request.first)
    failures = write_outputs(
        result,
        json_path=outputs.json_path,
        output_format=outputs.output_format,
        markdown=outputs.markdown,
        junit=outputs.junit,
        html=outputs.html,
    )
    for failure in failures:  # each file apart: one that fails costs no other
        make_console(stderr=True).print(Text(f"kata: error: {failure}"), soft_wrap=True)
    return max([result.exit_code(), *(f.exit_code for f in failures)])


def watch(make_console: Consoles, request: GradeRequest, outputs: Outputs, follow: Follow) -> int:
    """`grade` now and again at each save of the files, until the watch ends (then 0); once a
    report is out, the next grade's workers start, so that their torch is imported while the
    files are edited, not after the save."""
    from graders.judge.workers import GradeWorkers
    from graders.workflows.watch import watch as watch_files

    ahead: list[GradeWorkers] = []  # the next grade's workers, at most one set
    verdicts = Verdicts()  # the real-model item's verdict, while the file is unchanged

    def again() -> None:
        grade(make_console, request, outputs, follow, ahead.pop() if ahead else None, verdicts)
        ahead.append(GradeWorkers.start(_selection(request, follow).apply(request), ahead=True))

    make_console().print(
        Text(
            f"watching {request.implementation}"
            + (f" and {request.tests}" if request.tests else "")
            + " (Ctrl-C to stop)"
        )
    )
    try:
        watch_files([p for p in (request.implementation, request.tests) if p], again)
        return 0
    finally:
        for workers in ahead:
            workers.close()


class Verdicts:
    """The real-model item's last verdict in a `--watch`, and the implementation's bytes it was
    given for: a save that leaves them as they were (the tests edited, the file saved again
    unchanged) keeps it, instead of generating through the model again (seconds of a grade)."""

    def __init__(self):
        self.digest: str | None = None
        self.result: ItemResult | None = None

    def kept(self, implementation: Path) -> dict[str, ItemResult]:
        """{item id: its result} to keep for a grade of `implementation` as it is now."""
        now = _digest(implementation)
        if self.result is None or now is None or now != self.digest:
            self.digest, self.result = now, None
            return {}
        result = self.result
        if not result.message.startswith(KEPT):
            result = replace(result, message=KEPT + result.message)
        return {result.id: result}

    def hear(self, result: ItemResult) -> None:
        """An item's result as the grade ends it: the real-model item's is kept for the next."""
        if result.id == tracks.MODEL_ITEM and result.status in ("pass", "fail"):
            self.result = result


KEPT = "kept from the last grade (the file is unchanged): "


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _selection(request: GradeRequest, follow: Follow) -> last_failed.Selection:
    """The items `request` runs once the record is read: with `follow`, those the last grade
    did not pass first ("failed-first") or alone ("last-failed")."""
    if follow == "none":
        return last_failed.Selection(request.only, request.first, "")
    return last_failed.plan(
        request.implementation,
        request.track,
        request.only,
        request.up_to,
        last_failed=follow == "last-failed",
    )


def _fitting(workers: GradeWorkers | None, request: GradeRequest) -> GradeWorkers | None:
    """`workers`, started ahead, let go on the files as they are now; None when there are none,
    or they do not fit (the grade needs a tests worker they lack, or the other way round; a
    file is missing), or they died while waiting: then they are closed, and the grade starts
    its own."""
    if workers is None:
        return None
    files = [request.implementation, *([workers.tests] if workers.tests else [])]
    if not workers.fits(request) or not all(Path(f).is_file() for f in files):
        workers.close()
        return None
    return workers if workers.go() else None
