"""`kata grade` past its parsing: one grade shown in the terminal and written to the files asked
for; with --watch, one grade a save, the next run's workers started while the files are edited.

cli.py parses the options, refuses (exit 2) what it cannot use, and calls `grade`, whose return
is the exit code: the grade's (GradeResult.exit_code), or an output file's that could not be
written (graders.formats.outputs), whichever is higher. SandboxUnavailable (bubblewrap required
and not there) is raised to the caller, for which it is a usage error. Every path is absolute.

Nothing here imports torch on import: a grade starts its workers first, so that their torch
imports overlap this process's own import of the judge.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

from graders.shared import tracks
from graders.shared.output_files import STDOUT
from graders.shared.untrusted import file_name

# make_console() prints to standard output, make_console(stderr=True) to standard error (cli.py's
# _console: text the terminal's encoding cannot show is replaced).
Consoles = Callable[..., Console]


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


def grade(make_console: Consoles, implementation: Path, tests: Path | None, *, watch: bool,
          follow_failures: bool, last_failed: bool, shown: str, command: str, detail: str,
          json_path: Path | None, output_format: str, markdown: Path | None,
          junit: Path | None, html: Path | None = None, **options) -> int:
    """Grade once (`grade_and_report`), or with `watch` again at each save of the files until
    the watch ends (then 0). `options` are graders.judge.grade.grade's; with `follow_failures`
    (--ff, --lf, --watch) `only` and `first` follow the items the last grade did not pass
    (graders.workflows.last_failed.plan; with `last_failed`, only those)."""

    def planned() -> tuple:
        """(the plan, the options) of a run now: with `follow_failures`, they follow the items
        the last grade did not pass."""
        from graders.workflows.last_failed import Plan, plan

        only = options["only"]
        order = (plan(implementation, tracks.get(options["track"]), only, options["up_to"],
                      last_failed=last_failed)
                 if follow_failures else Plan(only, set(), ""))
        return order, {**options, "only": order.only, "first": order.first}

    ahead = []  # --watch: the next run's workers, started once a report is out
    verdicts = Verdicts()  # --watch: the real-model item's verdict, while the file is unchanged

    def run_once() -> int:
        order, run_options = planned()
        kept = verdicts.kept(implementation) if watch else {}
        code = grade_and_report(make_console, implementation, tests, shown=shown,
                                json_path=json_path, output_format=output_format,
                                markdown=markdown, junit=junit, html=html, detail=detail,
                                note=order.note, kept=kept, heard=verdicts.hear,
                                command=command, workers=take(ahead, implementation, tests,
                                                              run_options), **run_options)
        if watch:  # torch imported in them while the files are edited, not after the save
            ahead.append(start_workers(implementation, tests, planned()[1], ahead=True))
        return code

    try:
        if not watch:
            return run_once()
        from graders.workflows.watch import watch as watch_files

        make_console().print(Text(f"watching {implementation}"
                                  + (f" and {tests}" if tests else "") + " (Ctrl-C to stop)"))
        watch_files([p for p in (implementation, tests) if p], run_once)
        return 0
    finally:
        for workers in ahead:
            workers.close()


def start_workers(implementation: Path, tests: Path | None, options: dict, ahead: bool = False):
    """The workers a grade with `options` needs (graders.judge.workers.GradeWorkers.start)."""
    from graders.judge.workers import GradeWorkers

    return GradeWorkers.start(implementation, tests_run(tests, options),
                              tracks.get(options["track"]).module, options["sandbox"],
                              options["import_timeout"], ahead=ahead,
                              real_model=model_run(options))


def model_run(options: dict) -> bool:
    """Whether a grade with `options` runs the real-model item, and transformers is here."""
    from graders.shared import transformers_extra
    from graders.shared.rubric import selected

    track = tracks.get(options["track"])
    items = {item.id for item in selected(track, options["only"], options["up_to"])}
    return track.runs_model(items) and transformers_extra.problem() is None


def tests_run(tests: Path | None, options: dict) -> Path | None:
    """`tests` when an item a grade with `options` runs uses the candidate's tests, else None."""
    from graders.shared.rubric import selected

    track = tracks.get(options["track"])
    chosen = {item.id for item in selected(track, options["only"], options["up_to"])}
    return tests if track.runs_tests(chosen) else None


class Verdicts:
    """The real-model item's last verdict in a `--watch`, and the implementation's bytes it was
    given for: a save that leaves them as they were (the tests edited, the file saved again
    unchanged) keeps it, instead of generating through the model again (seconds of a grade)."""

    def __init__(self):
        self.digest: str | None = None
        self.result = None

    def kept(self, implementation: Path) -> dict:
        """{item id: its result} to keep for a grade of `implementation` as it is now."""
        now = _digest(implementation)
        if self.result is None or now is None or now != self.digest:
            self.digest, self.result = now, None
            return {}
        result = self.result
        if not result.message.startswith(KEPT):
            from dataclasses import replace

            result = replace(result, message=KEPT + result.message)
        return {result.id: result}

    def hear(self, result) -> None:
        """An item's result as the grade ends it: the real-model item's is kept for the next."""
        if result.id == tracks.MODEL_ITEM and result.status in ("pass", "fail"):
            self.result = result


KEPT = "kept from the last grade (the file is unchanged): "


def _digest(path: Path) -> str | None:
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def take(ahead: list, implementation: Path, tests: Path | None, options: dict):
    """The workers started ahead for this run, let go on the files as they are now; None when
    there are none, or they do not fit (the run needs a tests worker they lack, or the other
    way round; a file is missing), or they died while waiting: then they are closed, and the
    run starts its own."""
    if not ahead:
        return None
    workers = ahead.pop()
    files = [implementation, *([workers.tests] if workers.tests else [])]
    if workers.tests != tests_run(tests, options) or not all(f.is_file() for f in files):
        workers.close()
        return None
    return workers if workers.go() else None


def grade_and_report(make_console: Consoles, implementation: Path, tests: Path | None, *,
                     shown: str, json_path: Path | None, output_format: str,
                     markdown: Path | None, junit: Path | None, detail: str, note: str,
                     command: str, workers=None, html: Path | None = None, kept=None,
                     heard: Callable | None = None, **options) -> int:
    """Grade, record which items did not pass (graders.workflows.last_failed), print a line
    naming the files and `note` (not for the "quiet" and "brief" details), then the report at
    `detail` (graders.formats.report.render), and write the files asked for.

    Every path is absolute; `shown` is how the report names the implementation, `command` how
    to grade it again. `workers`: started ahead for this grade (None: started here). `kept`:
    items' results taken as they are (graders.judge.grade.grade); `heard` hears of each item
    as it ends."""
    from dataclasses import replace

    # The workers first: each imports torch while this process imports the judge, which does too.
    workers = workers or start_workers(implementation, tests, options)
    from graders.formats import report
    from graders.judge.grade import grade as run_grade
    from graders.workflows import last_failed

    # A report written to standard output (-) has it alone: the terminal's report goes to stderr.
    console = make_console(stderr=STDOUT in (json_path, markdown, junit, html))
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), console=console, transient=True,
                        disable=not console.is_terminal)
    with progress:
        task = progress.add_task(f"grading {shown}", total=None)

        def advance(result) -> None:
            progress.update(task, advance=1, description=f"graded {result.id}")
            if heard:
                heard(result)

        result = replace(run_grade(implementation, tests, workers=workers, on_item=advance,
                                   kept=kept, **options), implementation=shown)

    last_failed.record(implementation, result)
    if detail not in ("quiet", "brief"):
        console.print(Text.assemble(("kata grade ", "bold"), relative(implementation),
                                    f"  (tests: {relative(tests)})" if tests
                                    else "  (no test file)"))
        if note:
            console.print(Text(note, style="dim"))
    report.render(result, console, detail, command, first=options["first"])
    from graders.formats.outputs import write_outputs

    failures = write_outputs(result, json_path=json_path, output_format=output_format,
                             markdown=markdown, junit=junit, html=html)
    for failure in failures:  # each file apart: one that fails costs no other
        make_console(stderr=True).print(Text(f"kata: error: {failure}"), soft_wrap=True)
    return max([result.exit_code(), *(f.exit_code for f in failures)])
