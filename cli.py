"""`kata`: practise, grade and learn incremental decoding with a KV cache.

    kata init DIR                 a fresh candidate workspace
    kata grade [PATH]             grade an implementation (and its tests) against the rubric
    kata grade --track serving    grade the paged cache of the serving track
    kata hint ITEM [--step N]     hints, one step at a time
    kata rubric                   the items, their levels and points
    kata solution [NAME]          read a reference solution
    kata grade-all DIR            grade every submission under DIR (interviewers)
    kata bench [PATH ...]         decode-step speed and memory: the solutions, your files, peers

Exit codes of `grade` (the kata contract, section 3): 0 every item passes, 1 some item does not,
2 usage error, 4 the grader itself broke.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Practice kata: incremental decoding with a KV cache.")

ROOT = Path(__file__).resolve().parent
SOLUTIONS = {  # in the order a learner reads them
    "concat": ROOT / "solutions" / "concat_kv_cache.py",
    "preallocated": ROOT / "solutions" / "kv_cache.py",
    "paged": ROOT / "solutions" / "paged_kv_cache.py",
    "fused": ROOT / "benchmarks" / "fused_attention.py",
    "tests": ROOT / "solutions" / "test_kv_cache.py",
}
USAGE_ERROR = 2


def _console(stderr: bool = False) -> Console:
    # Text that the terminal's encoding cannot show is replaced, never a UnicodeEncodeError.
    stream = sys.stderr if stderr else sys.stdout
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(errors="replace")
    return Console(highlight=False, stderr=stderr)


def _usage_error(message: str) -> None:
    _console(stderr=True).print(Text(f"kata: error: {message}"))
    raise typer.Exit(USAGE_ERROR)


@app.command()
def grade(
    path: Annotated[Optional[Path], typer.Argument(
        help="The implementation \\[default: ./kv_cache.py in a workspace, else starter/kv_cache.py].",
        show_default=False)] = None,
    tests: Annotated[Optional[Path], typer.Option(
        "--tests", help="The candidate's own test file \\[default: test_<name>.py beside PATH].")] = None,
    track: Annotated[str, typer.Option(
        "--track", help="'dense' (the levels L4-L6, kv_cache.py) or 'serving' (the paged cache, "
        "paged_kv_cache.py).")] = "dense",
    hidden: Annotated[bool, typer.Option("--hidden", help="Add the interviewers' hidden graders.")] = False,
    graders: Annotated[Optional[Path], typer.Option(
        "--graders", help="A folder of your own hidden graders (with --hidden).")] = None,
    item: Annotated[Optional[list[str]], typer.Option(
        "--item", help="Grade only this item (repeatable).")] = None,
    level: Annotated[Optional[str], typer.Option(
        "--level", help="Grade only the items up to this level (L4, L5, L6).")] = None,
    exitfirst: Annotated[bool, typer.Option(
        "-x", "--exitfirst", help="Stop after the first item that does not pass.")] = False,
    watch: Annotated[bool, typer.Option(
        "--watch", help="Re-grade whenever the implementation or its tests are saved.")] = False,
    json_path: Annotated[Optional[Path], typer.Option(
        "--json", help="Also write the report as JSON to this file.")] = None,
    output_format: Annotated[str, typer.Option(
        "--format", help="The JSON written: 'kata' (the contract's) or 'gradescope' "
        "(results.json; written to --json FILE, or ./results.json).")] = "kata",
    markdown: Annotated[Optional[Path], typer.Option(
        "--markdown", help="Also write a one-page interviewer scorecard (Markdown).")] = None,
    junit: Annotated[Optional[Path], typer.Option(
        "--junit", help="Also write JUnit XML, for CI systems.")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds one batch of the candidate's calls may take.", min=0.1)] = 10.0,
) -> None:
    """Grade an implementation and print a rubric-scored report."""
    from graders.rubric import load
    from graders.workspace import default_target

    rubric = load()
    if track not in ("dense", "serving"):
        _usage_error(f"--track {track!r}: choose 'dense' or 'serving'")
    if path is None:
        path, default_tests = default_target(Path.cwd(), track)
        tests = tests or default_tests
    implementation = _python_file(path, "implementation")
    tests = _python_file(tests, "test file") if tests else _beside(implementation)
    if track == "serving":
        tests = None  # the serving track has no own-tests item
    known = {i.id for i in rubric.track(track)}
    for unknown in set(item or ()) - known:
        _usage_error(f"no rubric item {unknown!r} in the {track} track (kata rubric lists them)")
    if level is not None and level not in rubric.levels:
        _usage_error(f"no level {level!r}: choose one of {', '.join(rubric.levels)}")
    if graders is not None and not hidden:
        _usage_error("--graders adds hidden graders: use it with --hidden")
    if graders is not None and not graders.is_dir():
        _usage_error(f"--graders {graders} is not a folder")
    if output_format not in ("kata", "gradescope"):
        _usage_error(f"--format {output_format!r}: choose 'kata' or 'gradescope'")

    def run_once() -> int:
        return _grade_and_report(implementation, tests, track=track, hidden=hidden,
                                 extra_graders=graders,
                                 only=set(item) if item else None, up_to=level,
                                 exitfirst=exitfirst, timeout=timeout, json_path=json_path,
                                 output_format=output_format, markdown=markdown, junit=junit,
                                 brief=watch)

    if not watch:
        raise typer.Exit(run_once())
    from graders.watch import watch as watch_files

    _console().print(Text(f"watching {implementation}" + (f" and {tests}" if tests else "")
                          + " (Ctrl-C to stop)"))
    watch_files([p for p in (implementation, tests) if p], run_once)


def _grade_and_report(implementation: Path, tests: Path | None, *, json_path: Path | None,
                      output_format: str, markdown: Path | None, junit: Path | None,
                      brief: bool, **options) -> int:
    from graders import report
    from graders.grade import grade as run_grade

    console = _console()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), console=console, transient=True,
                        disable=not console.is_terminal)
    with progress:
        task = progress.add_task(f"grading {implementation}", total=None)

        def advance(result) -> None:
            progress.update(task, advance=1, description=f"graded {result.id}")

        result = run_grade(implementation, tests, on_item=advance, **options)

    if brief:
        report.render_summary(result, console)
    else:
        console.print(Text.assemble(("kata grade ", "bold"), str(implementation),
                                    f"  (tests: {tests})" if tests else "  (no test file)"))
        report.render(result, console)
    if output_format == "gradescope":
        from graders.gradescope import write_gradescope

        write_gradescope(result, json_path or Path("results.json"))
    elif json_path:
        report.write_json(result, json_path)
    if markdown:
        from graders.scorecard import write_markdown

        write_markdown(result, markdown)
    if junit:
        from graders.junit import write_junit

        write_junit(result, junit)
    return result.exit_code()


@app.command()
def init(directory: Annotated[Path, typer.Argument(help="Where to create the workspace.")]) -> None:
    """Create a fresh candidate workspace: the starter, its test file and instructions."""
    from graders.workspace import init_workspace

    try:
        written = init_workspace(directory)
    except FileExistsError as exc:
        _usage_error(str(exc))
    console = _console()
    for path in written:
        console.print(Text(f"created {path}"))
    console.print(Text(f"\nNext: cd {directory} && kata grade"))


@app.command()
def hint(
    item: Annotated[str, typer.Argument(help="A rubric item id, as the report shows it.")],
    step: Annotated[int, typer.Option(help="Which hint: 1 nudges, the last all but says it.",
                                      min=1)] = 1,
) -> None:
    """Show a hint for a rubric item, one step at a time."""
    from graders.hints import hint as hint_for

    try:
        text, steps = hint_for(item, step)
    except KeyError as exc:
        _usage_error(exc.args[0])
    console = _console()
    shown = min(step, steps)
    console.print(Text.assemble((item, "bold"), f", hint {shown} of {steps}: {text}"))
    if shown < steps:
        console.print(Text(f"more: kata hint {item} --step {shown + 1}", style="dim"))


@app.command()
def rubric() -> None:
    """Print the rubric: items, levels, points, what each checks, and the tells."""
    from graders import report

    report.render_rubric(_console())


@app.command()
def solution(
    name: Annotated[str, typer.Argument(
        help=f"One of: {', '.join(SOLUTIONS)}.")] = "preallocated",
) -> None:
    """Print a reference solution with syntax highlighting (learners: see solutions/README.md)."""
    from rich.syntax import Syntax

    if name not in SOLUTIONS:
        _usage_error(f"no solution {name!r}: choose one of {', '.join(SOLUTIONS)}")
    path = SOLUTIONS[name]
    _console().print(Syntax(path.read_text(), "python", line_numbers=True, word_wrap=True))


@app.command("grade-all")
def grade_all(
    directory: Annotated[Path, typer.Argument(help="A folder of submission folders.")],
    jobs: Annotated[int, typer.Option(help="Submissions graded at once.", min=1)] = 2,
    hidden: Annotated[bool, typer.Option("--hidden", help="Add the hidden graders.")] = False,
    out: Annotated[Path, typer.Option(help="Where summary.csv and summary.md go.")] = Path("."),
    timeout: Annotated[float, typer.Option(
        help="Seconds one batch of a candidate's calls may take.", min=0.1)] = 10.0,
) -> None:
    """Grade every submission folder (one holding kv_cache.py) under DIRECTORY."""
    from graders import batch
    from graders.workers import warm_workers

    if not directory.is_dir():
        _usage_error(f"{directory} is not a folder")
    submissions = batch.find_submissions(directory)
    if not submissions:
        _usage_error(f"no folder under {directory} holds a kv_cache.py")
    console = _console()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), console=console,
                  disable=not console.is_terminal) as progress:
        task = progress.add_task("grading submissions", total=len(submissions))
        with warm_workers():
            outcomes = batch.grade_all(submissions, jobs, hidden=hidden, timeout=timeout,
                                       on_done=lambda outcome: progress.advance(task))
    out.mkdir(parents=True, exist_ok=True)
    batch.write_summary(outcomes, out / "summary.csv", out / "summary.md")
    console.print(Text((out / "summary.md").read_text()))
    console.print(Text(f"wrote {out / 'summary.csv'} and {out / 'summary.md'}"))


@app.command()
def bench(
    paths: Annotated[Optional[list[Path]], typer.Argument(
        help="Candidate files to measure beside the bundled subjects (dense or paged) "
        "\\[default: ./kv_cache.py in a workspace].", show_default=False)] = None,
    lengths: Annotated[str, typer.Option(help="Cache lengths T, comma-separated.")]
        = "256,1024,4096,16384",
    dtypes: Annotated[str, typer.Option(help="Cache dtypes: float32, bfloat16, float16.")]
        = "float32,bfloat16",
    shapes: Annotated[str, typer.Option(
        help="mha (B=1, 8 query and 8 KV heads, D=128) and/or gqa (32 query heads, 8 KV).")]
        = "mha,gqa",
    subjects: Annotated[Optional[str], typer.Option(
        help="Bundled subjects, comma-separated \\[default: all; a wrong name lists them].",
        show_default=False)] = None,
    warmup: Annotated[int, typer.Option(help="Untimed steps per subject and cell.", min=1)] = 3,
    reps: Annotated[int, typer.Option(help="Timed steps per subject and cell.", min=1)] = 15,
    json_path: Annotated[Optional[Path], typer.Option(
        "--json", help="Also write every figure, the ratios and the machine's facts as JSON.")] = None,
    plot: Annotated[Optional[Path], typer.Option(
        help="Write a PNG plot (needs matplotlib: pip install -e '.\\[bench]').")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds one call into a subject may take.", min=0.1)] = 120.0,
) -> None:
    """Measure ms per decode step (append one token, then attend) and memory held, against bare
    attention, the pure read of K and V, and Hugging Face's caches."""
    from benchmarks import bench as benchmark
    from benchmarks import plot as plotting
    from benchmarks import report
    from benchmarks.subjects import SHAPES

    def listed(text: str, known, what: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        for name in names:
            if name not in known:
                _usage_error(f"no {what} {name!r}: choose from {', '.join(known)}")
        return names or _usage_error(f"no {what} given")

    try:
        sizes = [int(n) for n in lengths.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        _usage_error(f"--lengths {lengths!r}: give positive integers, comma-separated")
    chosen = set(listed(subjects, benchmark.BUNDLED_IDS, "subject") if subjects
                 else benchmark.BUNDLED_IDS)
    if not paths and Path("kv_cache.py").is_file():
        paths = [Path("kv_cache.py")]  # a workspace: the candidate's own file
    candidates = [_python_file(path, "candidate file") for path in paths or []]
    settings = benchmark.Settings(
        lengths=sizes, dtypes=listed(dtypes, ("float32", "bfloat16", "float16"), "dtype"),
        shapes=listed(shapes, list(SHAPES), "shape"),
        subjects=[s for s in benchmark.BUNDLED if s.id in chosen]
        + benchmark.candidate_specs(candidates),
        warmup=warmup, reps=reps, timeout=timeout)

    console = _console()
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), console=console, transient=True,
                        disable=not console.is_terminal)
    with progress:
        task = progress.add_task("starting", total=len(settings.cells) * len(settings.subjects))

        def on_event(event: dict) -> None:
            if event["event"] == "call":
                progress.update(task, description=f"{settings.cells[event['cell']]}: {event['subject']}")
            elif event["event"] == "result":
                progress.advance(task)

        try:
            result = benchmark.run(settings, on_event)
        except RuntimeError as exc:
            console.print(Text(f"kata bench: {exc}", style="red"))
            raise typer.Exit(4) from None
    report.render(result, console)
    if json_path:
        json_path.write_text(json.dumps(report.to_json(result), indent=2) + "\n")
        console.print(Text(f"wrote {json_path}"))
    if plot is not None:
        try:
            plotting.save_png(result, plot)
            console.print(Text(f"wrote {plot}"))
        except ImportError:
            console.print(Text("matplotlib is not installed (pip install -e '.[bench]'): "
                               "a text plot instead", style="yellow"))
            plot = None
    if plot is None:
        for (shape, dtype), group in plotting.series(result).items():
            console.print(Text(f"\n{shape}, {dtype}: ms per step against T", style="bold"))
            for line in plotting.terminal(group):
                console.print(Text(line))
    raise typer.Exit(1 if result.failed_candidates() else 0)


def _python_file(path: Path, what: str) -> Path:
    """`path` if it is an existing .py file; otherwise a one-line error and exit code 2."""
    if not path.exists():
        _usage_error(f"{what} {path} does not exist")
    if path.is_dir():
        _usage_error(f"{what} {path} is a directory, not a Python file")
    if path.suffix != ".py":
        _usage_error(f"{what} {path} is not a Python file (.py)")
    return path


def _beside(implementation: Path) -> Path | None:
    """The candidate's tests by the contract's naming: test_<name>.py beside the file."""
    tests = implementation.with_name(f"test_{implementation.name}")
    return tests if tests.is_file() else None


if __name__ == "__main__":
    sys.exit(app())
