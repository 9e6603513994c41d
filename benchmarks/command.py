"""`kata bench` past its parsing: its settings read from the options' text, the run with a
progress bar, the tables, and the JSON and the plot asked for.

cli.py parses the command line and calls `chosen_subjects`, `settings` and `run` in turn. The
first two raise ValueError, one line naming the option and what it takes, for text they cannot
read (a usage error for the caller, exit 2); `run` returns the exit code, and raises
graders.judge.isolation.SandboxUnavailable (bubblewrap required and not there) to the caller.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.text import Text

from benchmarks import bench as benchmark
from benchmarks.subjects import SHAPES

DTYPES = ("float32", "bfloat16", "float16")
BROKEN = 4  # exit code of the contract, section 3: the bench itself broke


def listed(text: str, known, what: str) -> list[str]:
    """The comma-separated names in `text`, each one of `known`; ValueError if not, or if there
    is none."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in known:
            raise ValueError(f"no {what} {name!r}: choose from {', '.join(known)}")
    if not names:
        raise ValueError(f"no {what} given")
    return names


def lengths(text: str) -> list[int]:
    """--lengths as positive integers; ValueError otherwise."""
    try:
        sizes = [int(n) for n in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--lengths {text!r}: give positive integers, comma-separated")
    return sizes


def chosen_subjects(text: str | None) -> set[str]:
    """The ids of the bundled subjects --subjects names: every one when it is not given."""
    return set(listed(text, benchmark.BUNDLED_IDS, "subject") if text else benchmark.BUNDLED_IDS)


def settings(
    *,
    lengths_text: str,
    dtypes: str,
    shapes: str,
    subjects: set[str],
    candidates: list[Path],
    warmup: int,
    reps: int,
    window: int,
    timeout: float,
    sandbox,
) -> benchmark.Settings:
    """The bench's Settings: --lengths, --dtypes and --shapes read (ValueError for text they
    cannot be), the bundled `subjects` in their order, then one subject per candidate file.
    `sandbox` is a graders.judge.isolation.Sandbox."""
    return benchmark.Settings(
        lengths=lengths(lengths_text),
        dtypes=listed(dtypes, DTYPES, "dtype"),
        shapes=listed(shapes, list(SHAPES), "shape"),
        subjects=[s for s in benchmark.BUNDLED if s.id in subjects]
        + benchmark.candidate_specs(candidates),
        warmup=warmup,
        reps=reps,
        window=window,
        timeout=timeout,
        sandbox=sandbox,
    )


def run(
    console: Console, settings: benchmark.Settings, json_path: Path | None, plot: Path | None
) -> int:
    """Run the bench with a progress bar, then `show` it: 0, or 1 when a candidate's file failed,
    or BROKEN (the bench itself broke, said in one line)."""
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
        task = progress.add_task("starting", total=len(settings.cells) * len(settings.subjects))

        def on_event(event: dict) -> None:
            if event["event"] == "call":
                cell = settings.cells[event["cell"]]
                progress.update(task, description=f"{cell}: {event['subject']}")
            elif event["event"] == "result":
                progress.advance(task)

        try:
            result = benchmark.run(settings, on_event)
        except RuntimeError as exc:
            console.print(Text(f"kata bench: {exc}", style="red"))
            return BROKEN
    show(result, console, json_path, plot)
    return 1 if result.failed_candidates() else 0


def show(
    result: benchmark.BenchResult, console: Console, json_path: Path | None, plot: Path | None
) -> None:
    """The tables; the JSON and the PNG plot when asked for; a text plot without the PNG."""
    from benchmarks import plot as plotting
    from benchmarks import report
    from graders.shared.output_files import write_atomically

    report.render(result, console)
    if json_path:
        write_atomically(json_path, json.dumps(report.to_json(result), indent=2) + "\n")
        console.print(Text(f"wrote {json_path}"))
    if plot is not None:
        try:
            plotting.save_png(result, plot)
            console.print(Text(f"wrote {plot}"))
        except ImportError:
            console.print(
                Text(
                    "matplotlib is not installed (pip install 'kvkata[bench]'): "
                    "a text plot instead",
                    style="yellow",
                )
            )
            plot = None
    if plot is None:
        for (shape, dtype), group in plotting.series(result).items():
            console.print(Text(f"\n{shape}, {dtype}: ms per step against T", style="bold"))
            for line in plotting.terminal(group):
                console.print(Text(line))
