"""`kata`: practise, grade and learn incremental decoding with a KV cache.

    kata init DIR                 a fresh candidate workspace
    kata grade [PATH]             grade an implementation (and its tests) against the rubric
    kata grade --track serving    grade the paged cache of the serving track
    kata hint ITEM [--step N]     hints, one step at a time
    kata rubric                   the items, their levels and points
    kata solution [NAME]          read a reference solution
    kata grade-all DIR            grade every submission under DIR (interviewers)
    kata bench [PATH ...]         decode-step speed and memory: the solutions, your files, peers
    kata interview [DIR]          practise it as an interview: stages, a clock, a record to replay
    kata export gradescope OUT    a Gradescope autograder bundle (github-action: a workflow)

Exit codes of `grade` (the kata contract, section 3): 0 every item passes, 1 some item does not,
2 usage error, 4 the grader itself broke (or the installation lacks one of the kata's files).

Every path on the command line is the user's: each command resolves its path arguments and
options against the folder it runs in (`_here`) before anything else, and passes on only
absolute paths. Every output file is checked for writability before any grading or benching.

This file parses and dispatches: the options and their help, the usage errors, and one call per
command into the module of its room, where what the command does lives (graders/workflows:
grading, grade_all, solutions, workspace, hints; benchmarks/command; graders/interview/commands;
graders/export).
"""

from __future__ import annotations

import os
import shlex
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.text import Text

from graders.judge.request import DEFAULT_IMPORT_TIMEOUT, DEFAULT_TIMEOUT, GradeRequest
from graders.shared import bundled
from graders.shared.tracks import DENSE, TRACKS
from graders.workflows.grading import relative
from graders.workflows.solutions import SOLUTIONS

# Where NumPy is missing, importing torch warns "Failed to initialize NumPy": neither the kata
# nor torch needs it, and the warning would send a user after a package they do not need.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Practice kata: incremental decoding with a KV cache.",
)

TRACK_HELP = " or ".join(f"'{t.id}' ({t.title}, {t.implementation})" for t in TRACKS.values()) + "."
USAGE_ERROR = 2
BROKEN = 4  # the kata itself, never the user or the candidate


class SandboxMode(str, Enum):
    """--sandbox: see graders.judge.isolation.Sandbox."""

    auto = "auto"
    require = "require"
    process = "process"


SANDBOX_HELP = (
    "How the candidate's code is walled off: 'auto' (bubblewrap where it works, else "
    "the process fallback), 'require' (refuse to run without bubblewrap) or "
    "'process' (the fallback)."
)
SEED_HELP = (
    "The seed the hidden cases are drawn from (with --hidden) \\[default: a fresh one each "
    "run, printed in the report]: the seed of a report replays its cases."
)
STRANGERS_SANDBOX_HELP = (
    " An interviewer's run grades a stranger's file: without bubblewrap it "
    "refuses (exit 2) unless told --sandbox process."
)
MEMORY_HELP = "GiB of memory each process the candidate's code runs in may use."


def _console(stderr: bool = False) -> Console:
    # Text that the terminal's encoding cannot show is replaced, never a UnicodeEncodeError.
    stream = sys.stderr if stderr else sys.stdout
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="replace")
    return Console(highlight=False, stderr=stderr)


def _usage_error(message: str) -> None:
    from graders.shared.untrusted import quote

    # The message may quote a path or a value the user gave: printable, on one line.
    line = quote(message).replace("\n", "\\x0a")
    _console(stderr=True).print(Text(f"kata: error: {line}"), soft_wrap=True)
    raise typer.Exit(USAGE_ERROR)


@app.callback()
def _installation() -> None:
    """Refuse, with exit code 4 and one line, to run on an installation missing the kata's files."""
    try:
        bundled.check()
    except bundled.KataFileMissing as exc:
        _console(stderr=True).print(Text(f"kata: {exc}"), soft_wrap=True)
        raise typer.Exit(BROKEN) from None


def _here(path: Path | None) -> Path | None:
    """`path` as the user meant it: relative to the folder the command runs in (the kata
    contract, section 3), made absolute; None stays None."""
    return None if path is None else Path.cwd() / path


def _output(path: Path | None) -> Path | None:
    """A report file as the user meant it: `-` is standard output (graders.shared.output_files.STDOUT),
    any other path is relative to the folder the command runs in (`_here`)."""
    from graders.shared.output_files import STDOUT

    return path if path == STDOUT else _here(path)


def _check_writable(option: str, path: Path | None) -> None:
    """Nothing when `path` is None or can be written as a file; else a one-line error, exit 2."""
    from graders.shared.output_files import OutputError, check_writable

    try:
        if path is not None:
            check_writable(path)
    except OutputError as exc:
        _usage_error(f"{option}: {exc}")


def _sandbox(mode: SandboxMode | None, memory_gib: float, strangers: bool = False):
    """The graders.judge.isolation.Sandbox of the --sandbox and --memory options. Without --sandbox
    (None): 'require' where the run grades strangers' files (`strangers`: `grade --hidden`,
    `grade-all`), else 'auto' (docs/decisions.md, "Interviewers' runs require bubblewrap")."""
    from graders.judge.isolation import GIB, Sandbox

    if mode is None:
        return Sandbox(
            mode="require" if strangers else "auto", memory=int(memory_gib * GIB), chosen=False
        )
    return Sandbox(mode=mode.value, memory=int(memory_gib * GIB))


@app.command()
def grade(
    path: Annotated[
        Optional[Path],
        typer.Argument(
            help="The implementation \\[default: ./kv_cache.py in a workspace, else starter/kv_cache.py].",
            show_default=False,
        ),
    ] = None,
    tests: Annotated[
        Optional[Path],
        typer.Option(
            "--tests", help="The candidate's own test file \\[default: test_<name>.py beside PATH]."
        ),
    ] = None,
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
    hidden: Annotated[
        bool, typer.Option("--hidden", help="Add the interviewers' hidden graders.")
    ] = False,
    graders: Annotated[
        Optional[Path],
        typer.Option("--graders", help="A folder of your own hidden graders (with --hidden)."),
    ] = None,
    item: Annotated[
        Optional[list[str]], typer.Option("--item", help="Grade only this item (repeatable).")
    ] = None,
    level: Annotated[
        Optional[str],
        typer.Option("--level", help="Grade only the items up to this level (L4, L5, L6)."),
    ] = None,
    exitfirst: Annotated[
        bool,
        typer.Option("-x", "--exitfirst", help="Stop after the first item that does not pass."),
    ] = False,
    failed_first: Annotated[
        bool,
        typer.Option(
            "--ff",
            "--failed-first",
            help="Grade first the items that did not pass last time (--watch does).",
        ),
    ] = False,
    last_failed: Annotated[
        bool,
        typer.Option(
            "--lf",
            "--last-failed",
            help="Grade only the items that did not pass last time (every item when none did).",
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Explain every item, passes included.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "-q",
            "--quiet",
            help="Print only the closing block: level, score, the items that do "
            "not pass and what to run next.",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="Re-grade whenever the implementation or its tests are saved."
        ),
    ] = False,
    json_path: Annotated[
        Optional[Path], typer.Option("--json", help="Also write the report as JSON to this file.")
    ] = None,
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="The JSON written: 'kata' (the contract's) or 'gradescope' "
            "(results.json; written to --json FILE, or ./results.json).",
        ),
    ] = "kata",
    markdown: Annotated[
        Optional[Path],
        typer.Option("--markdown", help="Also write a one-page interviewer scorecard (Markdown)."),
    ] = None,
    junit: Annotated[
        Optional[Path], typer.Option("--junit", help="Also write JUnit XML, for CI systems.")
    ] = None,
    html: Annotated[
        Optional[Path],
        typer.Option(
            "--html", help="Also write the report as one self-contained page for a browser."
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds of CPU time one batch of the candidate's calls may take, whole seconds "
            "(a batch that uses little CPU is stopped at 3x that on the clock).",
            min=0.1,
        ),
    ] = DEFAULT_TIMEOUT,
    import_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds of CPU time the candidate's file may take to import (apart from "
            "--timeout, which limits each batch of calls).",
            min=0.1,
        ),
    ] = DEFAULT_IMPORT_TIMEOUT,
    sandbox: Annotated[
        Optional[SandboxMode],
        typer.Option(
            help=SANDBOX_HELP
            + " \\[default: 'auto'; 'require' with --hidden]."
            + STRANGERS_SANDBOX_HELP,
            show_default=False,
        ),
    ] = None,
    memory: Annotated[float, typer.Option(help=MEMORY_HELP, min=0.1)] = 4.0,
    seed: Annotated[Optional[int], typer.Option(help=SEED_HELP, min=0)] = None,
) -> None:
    """Grade an implementation and print a rubric-scored report."""
    from graders.judge.isolation import SandboxUnavailable
    from graders.workflows import grading, target

    chosen = _track(track)
    shown = path  # the report names the file as the user typed it
    command = target.regrade_command(path, tests, chosen)
    graders = _here(graders)
    json_path, markdown, junit, html = (
        _output(json_path),
        _output(markdown),
        _output(junit),
        _output(html),
    )
    implementation, tests = _checked(target.grade_target, Path.cwd(), path, tests, chosen)
    _checked(target.check_selection, chosen, item or [], level)
    if graders is not None:
        _check_private_graders(graders, hidden, chosen)
    _check_seed(seed, hidden)
    _check_report_flags(verbose, quiet, hidden, failed_first or last_failed)
    json_path = _check_outputs(output_format, json_path, markdown, junit, html)
    detail = "quiet" if quiet else "verbose" if verbose else "brief" if watch else "default"
    request = GradeRequest(
        implementation,
        tests,
        track=chosen,
        hidden=hidden,
        extra_graders=graders,
        seed=seed,
        only=frozenset(item) if item else None,
        up_to=level,
        exitfirst=exitfirst,
        timeout=timeout,
        import_timeout=import_timeout,
        sandbox=_sandbox(sandbox, memory, strangers=hidden),
    )
    outputs = grading.Outputs(
        str(shown or implementation),
        command,
        detail,
        json_path,
        output_format,
        markdown,
        junit,
        html,
    )
    follow = (
        "none"
        if hidden
        else "last-failed"
        if last_failed
        else "failed-first"
        if failed_first or watch
        else "none"
    )
    try:
        code = (
            grading.watch(_console, request, outputs, follow)
            if watch
            else grading.grade(_console, request, outputs, follow)
        )
    except SandboxUnavailable as exc:
        _usage_error(str(exc))
    raise typer.Exit(code)


def _check_report_flags(verbose: bool, quiet: bool, hidden: bool, follow_failures: bool) -> None:
    """-v with -q, or --ff/--lf with --hidden: a one-line error, exit 2."""
    if verbose and quiet:
        _usage_error("-v shows more and -q less: choose one")
    if hidden and follow_failures:
        _usage_error(
            "--ff and --lf follow the failures of the last grade, which hidden runs "
            "do not keep: not with --hidden"
        )


def _check_seed(seed: int | None, hidden: bool) -> None:
    """--seed chooses the hidden cases: without --hidden, a one-line error, exit 2."""
    if seed is not None and not hidden:
        _usage_error("--seed chooses the hidden cases: use it with --hidden")


def _check_outputs(
    output_format: str,
    json_path: Path | None,
    markdown: Path | None,
    junit: Path | None,
    html: Path | None = None,
) -> Path | None:
    """The files `grade` writes, checked before it grades (a one-line error, exit 2, for one it
    could not write); returns the --json path, ./results.json for gradescope by default."""
    if output_format not in ("kata", "gradescope"):
        _usage_error(f"--format {output_format!r}: choose 'kata' or 'gradescope'")
    from graders.shared.output_files import STDOUT

    if output_format == "gradescope" and json_path is None:
        json_path = Path.cwd() / "results.json"
    outputs = (
        ("--json", json_path),
        ("--markdown", markdown),
        ("--junit", junit),
        ("--html", html),
    )
    to_stdout = [option for option, output in outputs if output == STDOUT]
    if len(to_stdout) > 1:
        _usage_error(
            f"{' and '.join(to_stdout)} both write to standard output (-): give one of them a file"
        )
    for option, output in outputs:
        _check_writable(option, output)
    return json_path


def _track(track_id: str):
    """The graders.shared.tracks.Track named by --track; a one-line error, exit 2, when none is."""
    from graders.shared import tracks

    try:
        return tracks.get(track_id)
    except KeyError as exc:
        _usage_error(f"--track: {exc.args[0]}")


def _check_private_graders(folder: Path, hidden: bool, track) -> None:
    """--graders: with --hidden, a folder whose every grader file can be used on `track`
    (graders.workflows.grading.check_private_graders); a one-line error, exit 2, when not."""
    if not hidden:
        _usage_error("--graders adds hidden graders: use it with --hidden")
    from graders.workflows.grading import check_private_graders

    _checked(check_private_graders, folder, track)


@app.command()
def init(directory: Annotated[Path, typer.Argument(help="Where to create the workspace.")]) -> None:
    """Create a fresh candidate workspace: the starter, its test file and instructions."""
    from graders.workflows.workspace import init_workspace

    try:
        written = init_workspace(_here(directory))
    except OSError as exc:  # ours carry a sentence; the operating system's, an errno
        reason = exc.strerror and f"{exc.strerror} ({exc.filename})"
        _usage_error(f"cannot make a workspace in {directory}: {reason}" if reason else str(exc))
    console = _console()
    for path in written:
        console.print(Text(f"created {directory / path.name}"))
    console.print(Text(f"\nNext: cd {shlex.quote(str(directory))} && kata grade"))


@app.command()
def hint(
    item: Annotated[str, typer.Argument(help="A rubric item id, as the report shows it.")],
    step: Annotated[
        int, typer.Option(help="Which hint: 1 nudges, the last all but says it.", min=1)
    ] = 1,
) -> None:
    """Show a hint for a rubric item, one step at a time."""
    from graders.workflows.hints import hint as hint_for
    from graders.workflows.hints import label

    try:
        text, steps = hint_for(item, step)
    except KeyError as exc:
        _usage_error(exc.args[0])
    _in_session("hint", item, step)
    console = _console()
    console.print(Text.assemble((item, "bold"), f", {label(step, steps)}: {text}"))
    if step < steps:
        console.print(Text(f"more: kata hint {item} --step {step + 1}", style="dim"))


@app.command()
def rubric() -> None:
    """Print the rubric: items, levels, points, what each checks, and the tells."""
    from graders.formats import report

    report.render_rubric(_console())


@app.command()
def solution(
    name: Annotated[
        Optional[str],
        typer.Argument(
            help=f"One of: {', '.join(SOLUTIONS)} \\[default: preallocated].", show_default=False
        ),
    ] = None,
    diff: Annotated[
        Optional[tuple[str, str]],
        typer.Option(
            "--diff",
            metavar="FROM TO",
            help="Print what changes from one step to another: --diff concat preallocated.",
        ),
    ] = None,
    readme: Annotated[
        bool,
        typer.Option(
            "--readme",
            help="Print the story of the steps: how they form a tree, what each "
            "changes, and the bench's table.",
        ),
    ] = False,
) -> None:
    """Print a reference solution, or with --diff the change from one step to another
    (learners: start with --readme, which draws the steps as a tree).

    In a terminal, highlighted; otherwise the file's exact source (or the plain unified diff,
    or the README's Markdown), so that `kata solution concat > f.py` makes a file to grade."""
    from graders.workflows import solutions

    if readme:
        if name is not None or diff is not None:
            _usage_error("--readme prints the steps' story alone: no NAME, no --diff")
        _in_session("solution", "readme")
        solutions.show_readme(_console)
        return
    if diff is not None:
        if name is not None:
            _usage_error("give a solution NAME or --diff FROM TO, not both")
        for step in diff:
            _known_step(step)
        text = solutions.step_diff(*diff)
        _in_session("solution", " -> ".join(diff))
        solutions.show_diff(_console, text)
        return
    name = name or "preallocated"
    _known_step(name)
    _in_session("solution", name)
    solutions.show(_console, name)


def _in_session(what: str, name: str, step: int = 1) -> None:
    """A hint or a solution asked inside a workspace (the folder the command runs in, or one of
    its parents) whose interview session is live: recorded; in a strict session refused (exit 1)
    and the refusal recorded (graders.interview.session.asked_from)."""
    from graders.interview import session

    try:
        session.asked_from(Path.cwd(), what, name, step)
    except session.Refused as exc:
        _console(stderr=True).print(Text(f"kata: {exc}"), soft_wrap=True)
        raise typer.Exit(1) from None


def _known_step(name: str) -> None:
    """A one-line error, exit 2, unless `name` is one of SOLUTIONS."""
    if name not in SOLUTIONS:
        _usage_error(f"no solution {name!r}: choose one of {', '.join(SOLUTIONS)}")


@app.command("grade-all")
def grade_all(
    directory: Annotated[Path, typer.Argument(help="A folder of submission folders.")],
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
    jobs: Annotated[int, typer.Option(help="Submissions graded at once.", min=1)] = 2,
    hidden: Annotated[bool, typer.Option("--hidden", help="Add the hidden graders.")] = False,
    out: Annotated[Path, typer.Option(help="Where summary.csv and summary.md go.")] = Path("."),
    timeout: Annotated[
        float,
        typer.Option(
            help="Seconds of CPU time one batch of a candidate's calls may take, whole seconds (a "
            "batch that uses little CPU is stopped at 3x that on the clock).",
            min=0.1,
        ),
    ] = DEFAULT_TIMEOUT,
    import_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds of CPU time a candidate's file may take to import (apart from "
            "--timeout, which limits each batch of calls).",
            min=0.1,
        ),
    ] = DEFAULT_IMPORT_TIMEOUT,
    sandbox: Annotated[
        Optional[SandboxMode],
        typer.Option(
            help=SANDBOX_HELP + " \\[default: 'require']." + STRANGERS_SANDBOX_HELP,
            show_default=False,
        ),
    ] = None,
    memory: Annotated[float, typer.Option(help=MEMORY_HELP, min=0.1)] = 4.0,
    seed: Annotated[Optional[int], typer.Option(help=SEED_HELP, min=0)] = None,
) -> None:
    """Grade every submission folder (one holding the track's file: kv_cache.py, or
    paged_kv_cache.py with --track serving) under DIRECTORY.

    Nothing that resolves outside DIRECTORY is graded; what is skipped is listed, with the
    reason. summary.csv and summary.md are rewritten after each grade, so that a batch that is
    interrupted or fails keeps what it finished; --out is made and tried before the first."""
    from graders.judge.isolation import SandboxUnavailable
    from graders.shared.output_files import OutputError
    from graders.shared.untrusted import file_name
    from graders.workflows import grade_all as command

    chosen = _track(track)
    directory, out = _here(directory), _here(out)
    if not directory.is_dir():
        _usage_error(f"{file_name(directory)} is not a folder")
    _check_seed(seed, hidden)
    submissions, skipped = _checked(command.survey, directory, chosen)
    summaries = _checked(command.make_out, out)
    settings = GradeRequest(
        directory,
        track=chosen,
        hidden=hidden,
        seed=seed,
        timeout=timeout,
        import_timeout=import_timeout,
        sandbox=_sandbox(sandbox, memory, strangers=True),
    )
    try:
        command.run(_console(), submissions, skipped, summaries, settings, jobs)
    except (SandboxUnavailable, OutputError) as exc:
        _usage_error(str(exc))


@app.command()
def bench(
    paths: Annotated[
        Optional[list[Path]],
        typer.Argument(
            help="Candidate files to measure beside the bundled subjects (dense or paged) "
            "\\[default: ./kv_cache.py in a workspace].",
            show_default=False,
        ),
    ] = None,
    lengths: Annotated[
        str, typer.Option(help="Cache lengths T, comma-separated.")
    ] = "256,1024,4096,16384",
    dtypes: Annotated[
        str, typer.Option(help="Cache dtypes: float32, bfloat16, float16.")
    ] = "float32,bfloat16",
    shapes: Annotated[
        str,
        typer.Option(
            help="mha (B=1, 8 query and 8 KV heads, D=128) and/or gqa (32 query heads, 8 KV)."
        ),
    ] = "mha,gqa",
    subjects: Annotated[
        Optional[str],
        typer.Option(
            help="Bundled subjects, comma-separated \\[default: all; a wrong name lists them].",
            show_default=False,
        ),
    ] = None,
    warmup: Annotated[int, typer.Option(help="Untimed steps per subject and cell.", min=1)] = 3,
    reps: Annotated[int, typer.Option(help="Timed steps per subject and cell.", min=1)] = 15,
    window: Annotated[
        int,
        typer.Option(
            help="W of the windowed subjects (KVCache(window=W), and bare attention over W).", min=1
        ),
    ] = 1024,
    json_path: Annotated[
        Optional[Path],
        typer.Option(
            "--json", help="Also write every figure, the ratios and the machine's facts as JSON."
        ),
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(help="Write a PNG plot (needs matplotlib: pip install 'kvkata\\[bench]')."),
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds one call into a subject may take.", min=0.1)
    ] = 120.0,
    sandbox: Annotated[SandboxMode, typer.Option(help=SANDBOX_HELP)] = SandboxMode.auto,
    # The default is benchmarks.bench.Settings' (not imported here: it loads torch).
    memory: Annotated[
        float,
        typer.Option(
            help="GiB of memory the bench process may use: it holds every subject's cache of a cell "
            "at once, about 3 GiB at T=16384 with the bundled subjects.",
            min=0.1,
        ),
    ] = 8.0,
) -> None:
    """Measure ms per decode step (append one token, then attend) and memory held, against bare
    attention, the pure read of K and V, and Hugging Face's caches."""
    from benchmarks import command
    from graders.judge.isolation import SandboxUnavailable

    paths, json_path, plot = [_here(path) for path in paths or []], _here(json_path), _here(plot)
    chosen = _checked(command.chosen_subjects, subjects)
    if not paths and (Path.cwd() / DENSE.implementation).is_file():
        paths = [Path.cwd() / DENSE.implementation]  # a workspace: the candidate's own file
    candidates = [_python_file(path, "candidate file") for path in paths]
    _check_writable("--json", json_path)
    _check_writable("--plot", plot)
    settings = _checked(
        command.settings,
        lengths_text=lengths,
        dtypes=dtypes,
        shapes=shapes,
        subjects=chosen,
        candidates=candidates,
        warmup=warmup,
        reps=reps,
        window=window,
        timeout=timeout,
        sandbox=_sandbox(sandbox, memory),
    )
    try:
        raise typer.Exit(command.run(_console(), settings, json_path, plot))
    except SandboxUnavailable as exc:
        _usage_error(str(exc))


def _checked(check, *args, **kwargs):
    """`check(*args, **kwargs)` (a check that raises FileNotFoundError or ValueError with one
    line, as graders.workflows.target's do); that line as an error, exit 2, when it raises."""
    try:
        return check(*args, **kwargs)
    except (FileNotFoundError, ValueError) as exc:
        _usage_error(str(exc))


def _python_file(path: Path, what: str) -> Path:
    """`path` if it is an existing .py file; otherwise a one-line error and exit code 2."""
    from graders.workflows.target import python_file

    return _checked(python_file, path, what)


class _InterviewVerbs(TyperGroup):
    """`kata interview`'s verbs, with `run` (the interactive session) taken when the first word
    is no verb: `kata interview [DIR]`. A verb wins over a folder of its name (./start)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = ["run", *args]
        return super().parse_args(ctx, args)


interview_app = typer.Typer(
    cls=_InterviewVerbs,
    add_completion=False,
    help="Practise the kata as an interview: the question in stages, a clock, every save graded "
    "and kept, conceptual questions, and a record to replay (kata interview [DIR]).",
)
app.add_typer(interview_app, name="interview")
MINUTES_HELP = "Minutes on the clock (a session resumed keeps its own)."
STRICT_HELP = (
    "An interviewer's session: hints and solutions are refused, and each refusal recorded."
)
WORKSPACE_HELP = "The workspace (made as kata init makes one when it has no kv_cache.py)."


@interview_app.command("run")
def interview_run(
    directory: Annotated[Path, typer.Argument(help=WORKSPACE_HELP)] = Path("."),
    minutes: Annotated[int, typer.Option(help=MINUTES_HELP, min=1)] = 60,
    strict: Annotated[bool, typer.Option("--strict", help=STRICT_HELP)] = False,
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
) -> None:
    """The interactive session, the default verb: stages, a clock, every save graded.

    Shows the current stage, grades each save of the files, and ends at time up or on Ctrl-C."""
    from graders.interview import commands

    raise typer.Exit(
        commands.interactive(_console(), _here(directory), minutes, strict, _track(track))
    )


@interview_app.command("start")
def interview_start(
    directory: Annotated[Path, typer.Argument(help=WORKSPACE_HELP)],
    minutes: Annotated[int, typer.Option(help=MINUTES_HELP, min=1)] = 60,
    strict: Annotated[bool, typer.Option("--strict", help=STRICT_HELP)] = False,
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
) -> None:
    """Start (or resume) a session and show its current stage."""
    from graders.interview import commands

    raise typer.Exit(commands.start(_console(), _here(directory), minutes, strict, _track(track)))


@interview_app.command("save")
def interview_save(
    directory: Annotated[Path, typer.Argument(help="The session's workspace.")],
) -> None:
    """What a watched save does: snapshot the files, grade them (the stages opened), record."""
    from graders.interview import commands

    raise typer.Exit(commands.save(_console(), _here(directory)))


@interview_app.command("end")
def interview_end(
    directory: Annotated[Path, typer.Argument(help="The session's workspace.")],
) -> None:
    """End the session: the final grade with the hidden cases, then the report (idempotent)."""
    from graders.interview import commands

    raise typer.Exit(commands.end(_console(), _here(directory)))


VERIFY_HELP = (
    "Grade every snapshot again (public cases; the final with --hidden at the "
    "recorded seed) and show beside each claim of the record whether the grade "
    "agrees: a record edited by hand is named as such."
)
VERIFY_SANDBOX_HELP = (
    SANDBOX_HELP + " With --verify \\[default: 'require']." + STRANGERS_SANDBOX_HELP
)


@interview_app.command("report")
def interview_report(
    directory: Annotated[Path, typer.Argument(help="The session's workspace.")],
    markdown: Annotated[
        Optional[Path],
        typer.Option("--markdown", help="Also write the report as Markdown, for the interviewer."),
    ] = None,
    json_path: Annotated[
        Optional[Path], typer.Option("--json", help="Also write the report as JSON.")
    ] = None,
    plot: Annotated[
        Optional[Path],
        typer.Option(
            help="Write the level over time as a PNG (needs matplotlib: pip install "
            "'kvkata\\[bench]')."
        ),
    ] = None,
    html: Annotated[
        Optional[Path],
        typer.Option(
            "--html",
            help="Also write the session as one self-contained page to review in a "
            "browser: its timeline, every snapshot, the final grade, the answers.",
        ),
    ] = None,
    verify: Annotated[bool, typer.Option("--verify", help=VERIFY_HELP)] = False,
    sandbox: Annotated[
        Optional[SandboxMode], typer.Option(help=VERIFY_SANDBOX_HELP, show_default=False)
    ] = None,
) -> None:
    """The session's report, for the interviewer.

    What was checked of the record first (--verify: every claim), then each save, time to each
    level, first passes, hints, the level over time, the final grade, and each answer beside
    its model answer."""
    from graders.interview import commands

    from graders.shared.output_files import STDOUT

    markdown, json_path, plot, html = (
        _output(markdown),
        _output(json_path),
        _here(plot),
        _output(html),
    )
    to_stdout = [
        option
        for option, path in (("--markdown", markdown), ("--json", json_path), ("--html", html))
        if path == STDOUT
    ]
    if len(to_stdout) > 1:
        _usage_error(
            f"{' and '.join(to_stdout)} both write to standard output (-): give one of them a file"
        )
    for option, path in (
        ("--markdown", markdown),
        ("--json", json_path),
        ("--plot", plot),
        ("--html", html),
    ):
        _check_writable(option, path)
    # A report written to standard output (-) has it alone: the terminal's report goes to stderr.
    console = _console(stderr=STDOUT in (markdown, json_path, html))
    raise typer.Exit(
        commands.report(
            console,
            _here(directory),
            markdown,
            json_path,
            plot,
            html,
            _verify_sandbox(verify, sandbox),
        )
    )


@interview_app.command("replay")
def interview_replay(
    directory: Annotated[Path, typer.Argument(help="The session's workspace.")],
    step: Annotated[
        Optional[int], typer.Option(help="Show only snapshot N (its number, 1 for 001-...).", min=1)
    ] = None,
    verify: Annotated[bool, typer.Option("--verify", help=VERIFY_HELP)] = False,
    sandbox: Annotated[
        Optional[SandboxMode], typer.Option(help=VERIFY_SANDBOX_HELP, show_default=False)
    ] = None,
) -> None:
    """Each snapshot's diff from the one before, with its grade and time (--verify: checked)."""
    from graders.interview import commands

    raise typer.Exit(
        commands.replay(_console(), _here(directory), step, _verify_sandbox(verify, sandbox))
    )


def _verify_sandbox(verify: bool, sandbox: SandboxMode | None):
    """The sandbox --verify grades in (None without --verify): a session folder sent in is a
    stranger's files, graded as `kata grade --hidden` grades them (bubblewrap, unless told
    --sandbox process). --sandbox without --verify: a one-line error, exit 2."""
    if not verify:
        if sandbox is not None:
            _usage_error(
                "--sandbox chooses where --verify grades the snapshots: not without --verify"
            )
        return None
    return _sandbox(sandbox, 4.0, strangers=True)


export_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Grade past one machine: a Gradescope autograder bundle, or a GitHub Actions workflow "
    "for a candidate's repository.",
)
app.add_typer(export_app, name="export")


@export_app.command("gradescope")
def export_gradescope(
    out: Annotated[Path, typer.Argument(help="The bundle to write (a .zip).")],
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
    hidden: Annotated[
        bool,
        typer.Option(
            "--hidden",
            help="Grade with the hidden graders too (their results are shown when "
            "grades are published).",
        ),
    ] = False,
    graders: Annotated[
        Optional[Path],
        typer.Option(
            "--graders", help="A folder of your own hidden graders to bundle (with --hidden)."
        ),
    ] = None,
    seed: Annotated[
        Optional[int],
        typer.Option(
            help="The hidden cases' seed for every submission (with --hidden) \\[default: one drawn "
            "now, written in the bundle].",
            min=0,
        ),
    ] = None,
    fresh_seeds: Annotated[
        bool,
        typer.Option(
            "--fresh-seeds", help="A fresh seed for each submission instead of one for all."
        ),
    ] = False,
    wheel: Annotated[
        Optional[Path],
        typer.Option(
            "--wheel", help="The kata's wheel to bundle \\[default: built from this checkout]."
        ),
    ] = None,
) -> None:
    """Write a Gradescope autograder bundle: setup.sh, run_autograder and the kata's wheel.

    Upload it as the assignment's autograder (docs/gradescope.md)."""
    from graders.export import gradescope
    from graders.export.wheel import WheelError

    chosen = _track(track)
    out, graders, wheel = _here(out), _here(graders), _here(wheel)
    if out.suffix != ".zip":
        _usage_error(f"{relative(out)}: the bundle is a zip: name it .zip")
    if fresh_seeds and seed is not None:
        _usage_error("--fresh-seeds and --seed: choose one")
    if fresh_seeds and not hidden:
        _usage_error("--fresh-seeds chooses the hidden cases: use it with --hidden")
    _check_seed(seed, hidden)
    if graders is not None:
        _check_private_graders(graders, hidden, chosen)
    if wheel is not None and (not wheel.is_file() or wheel.suffix != ".whl"):
        _usage_error(f"--wheel {relative(wheel)} is not a wheel file (.whl)")
    _check_writable("OUT", out)
    if hidden and seed is None and not fresh_seeds:
        from graders.judge.grade import draw_seed

        seed = draw_seed()  # one for every submission, drawn as any hidden run draws its own
    assignment = gradescope.Assignment(
        track=chosen.id,
        hidden=hidden,
        seed=seed,
        torch=gradescope.torch_version(),
        private_graders=graders is not None,
    )
    try:
        gradescope.export(out, assignment, graders, wheel)
    except (gradescope.ExportError, WheelError) as exc:
        _usage_error(str(exc))
    seeded = f", seed {seed}" if seed is not None else ", a fresh seed each" if hidden else ""
    _console().print(
        Text(
            f"wrote {relative(out)}: track {chosen.id}"
            + (", hidden graders" if hidden else ", public cases")
            + seeded
            + (", private graders" if graders is not None else "")
        )
    )


@export_app.command("github-action")
def export_github_action(
    directory: Annotated[Path, typer.Argument(help="The candidate's repository (its root).")],
    track: Annotated[str, typer.Option("--track", help=TRACK_HELP)] = DENSE.id,
    package: Annotated[
        str,
        typer.Option(help="What the workflow installs the kata from (a pip requirement or URL)."),
    ] = "kvkata==0.1.0",
) -> None:
    """Write .github/workflows/kata.yml: kata grade on every push, public cases only."""
    from graders.export import github_action
    from graders.export.gradescope import torch_version
    from graders.shared.output_files import OutputError

    chosen = _track(track)
    try:
        path = github_action.export(_here(directory), chosen, torch_version(), package)
    except OutputError as exc:
        _usage_error(str(exc))
    _console().print(Text(f"wrote {relative(path)}"))


def main() -> None:
    """The `kata` command: the app, then os._exit once its output is flushed. Tearing down an
    interpreter that has imported torch takes about 0.4 s, a quarter of the import, and there is
    nothing left to tear down: the workers are gone and every file is written and closed before
    a command returns."""
    try:
        app()
        code = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # sys.exit("message"), as the interpreter would show it
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a reader that went away, or a closed stream
            pass
    os._exit(code)


if __name__ == "__main__":
    main()
