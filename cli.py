"""`kata`: grade a KV-cache implementation against the kata's rubric.

    kata grade [PATH] [--tests FILE] [--hidden] [--json FILE]

Exit codes (the kata contract, section 3): 0 every item passes, 1 some item does not, 2 usage
error, 4 the grader itself broke.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Practice kata: incremental decoding with a KV cache.")

DEFAULT_IMPLEMENTATION = Path("starter/kv_cache.py")
USAGE_ERROR = 2


@app.callback()
def main() -> None:
    """Practice kata: incremental decoding with a KV cache."""


@app.command()
def grade(
    path: Annotated[Path, typer.Argument(help="The implementation to grade.")] = DEFAULT_IMPLEMENTATION,
    tests: Annotated[Optional[Path], typer.Option(
        "--tests", help="The candidate's own test file [default: test_<name>.py beside PATH].")] = None,
    hidden: Annotated[bool, typer.Option("--hidden", help="Add the interviewers' hidden graders.")] = False,
    json_path: Annotated[Optional[Path], typer.Option(
        "--json", help="Also write the report as JSON to this file.")] = None,
    timeout: Annotated[float, typer.Option(
        help="Seconds one batch of the candidate's calls may take.", min=0.1)] = 10.0,
) -> None:
    """Grade an implementation and print a rubric-scored report."""
    console = Console(highlight=False)
    implementation = _python_file(path, "implementation")
    tests = _python_file(tests, "test file") if tests else _default_tests(implementation)

    from graders import report
    from graders.grade import grade as run_grade
    from graders.rubric import load

    total = len(load().items)
    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"), console=console,
                        transient=True, disable=not console.is_terminal)
    with progress:
        task = progress.add_task(f"grading {implementation}", total=total)

        def advance(item) -> None:
            progress.update(task, advance=1, description=f"graded {item.id}")

        result = run_grade(implementation, tests, hidden=hidden, timeout=timeout, on_item=advance)

    console.print(f"[bold]kata grade[/bold] {implementation}"
                  + (f"  (tests: {tests})" if tests else "  (no test file)"))
    report.render(result, console)
    if json_path:
        report.write_json(result, json_path)
    raise typer.Exit(result.exit_code())


def _python_file(path: Path, what: str) -> Path:
    """`path` if it is an existing .py file; otherwise a one-line error and exit code 2."""
    problem = None
    if not path.exists():
        problem = "does not exist"
    elif path.is_dir():
        problem = "is a directory, not a Python file"
    elif path.suffix != ".py":
        problem = "is not a Python file (.py)"
    if problem:
        Console(stderr=True, highlight=False).print(f"kata: error: {what} {path} {problem}")
        raise typer.Exit(USAGE_ERROR)
    return path


def _default_tests(implementation: Path) -> Path | None:
    candidate = implementation.with_name(f"test_{implementation.name}")
    return candidate if candidate.is_file() else None


if __name__ == "__main__":
    sys.exit(app())
