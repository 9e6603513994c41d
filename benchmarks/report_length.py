"""How long the default report is, at 80 columns, for every wrong implementation of tests/wrong
(one bug each), the untouched starter and a file whose items fail for many different reasons:
issue 44's screen, at most REPORT_LINES_ONE_BUG lines for one bug and SCREEN_LINES for the
others. Run from the kata's folder:

    python -m benchmarks.report_length          # prints the median, the max, the files over

A report's lines are what `kata grade FILE` prints: its first line (the file, and that it has no
test file), then `render` at 80 columns. tests/test_report_causes.py holds the bounds (slow);
this prints the figures.
"""

from __future__ import annotations

import io
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from graders.formats.report import SCREEN_LINES, render
from graders.judge.grade import grade
from graders.judge.result import GradeResult
from graders.judge.request import GradeRequest
from graders.judge.workers import GradeWorkers
from graders.shared.tracks import DENSE, Track

ROOT = Path(__file__).resolve().parent.parent
REPORT_LINES_ONE_BUG = 30  # issue 44: a file with one bug
WIDTH = 80
PARALLEL = 3  # grades at once: each mostly waits on its own worker


@dataclass(frozen=True)
class Subject:
    """A file to grade: `name`, its `path`, its `track`, and whether it holds one bug."""

    name: str
    path: Path
    track: Track
    one_bug: bool


def report_lines(result: GradeResult, width: int = WIDTH) -> list[str]:
    """The lines `kata grade FILE` prints for `result` at `width` columns, its first line
    included, FILE named as in the candidate's own folder (its name: the graded copy's folder
    is a temporary one, whose length says nothing of the report)."""
    name = Path(result.implementation).name
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(f"kata grade {name}  (no test file)")
    render(result, console, "default", f"kata grade {name}")
    return console.export_text().rstrip("\n").splitlines()


def subjects(folder: Path) -> list[Subject]:
    """Every wrong implementation of tests/wrong, written in `folder`, the starter, and the
    file of many reasons (`many_reasons`)."""
    sys.path.insert(0, str(ROOT))
    from tests.wrong import everything

    found = []
    for wrong in everything():
        (folder / wrong.name).mkdir()
        found.append(Subject(wrong.name, wrong.write(folder / wrong.name), wrong.track, True))
    found.append(Subject("starter", ROOT / "starter" / "kv_cache.py", DENSE, False))
    (folder / "many-reasons").mkdir()
    path = folder / "many-reasons" / "kv_cache.py"
    path.write_text(many_reasons().source())
    found.append(Subject("many-reasons", path, DENSE, False))
    return found


# Wrong implementations of tests/wrong whose items depend on no other's: together, a file
# whose items fail for many different reasons (each its own cause).
MANY_REASONS = (
    "batch-not-checked",
    "dtype-not-checked",
    "softmax-batch-max",
    "reset-keeps-capacity",
    "release-does-nothing",
    "capacity-request-ignored",
    "caches-queries",
    "gqa-head-mapping-modulo",
    "fork-shares-storage",
    "reorder-keys-only",
    "softmax-in-cache-dtype",
    "grows-by-8-slots",
    "writes-padding",
)


def many_reasons():
    """The mistakes of MANY_REASONS in one file (a graders.shared.mutation.Mutant)."""
    sys.path.insert(0, str(ROOT))
    from graders.shared.mutation import Mutant
    from tests.wrong import everything

    chosen = [w.implementation for w in everything() if w.name in MANY_REASONS]
    return Mutant(
        "many-reasons",
        "the mistakes of " + ", ".join(MANY_REASONS),
        replace=tuple(r for m in chosen for r in m.replace),
        functions={k: v for m in chosen for k, v in m.functions.items()},
    )


def _grade(subject: Subject) -> GradeResult:
    request = GradeRequest(subject.path, track=subject.track)
    return grade(request, GradeWorkers.start(request))


def graded(chosen: list[Subject]) -> dict[str, GradeResult]:
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(pool.map(lambda s: (s.name, _grade(s)), chosen))


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        chosen = subjects(Path(folder))
        results = graded(chosen)
    counts = {s.name: len(report_lines(results[s.name])) for s in chosen}
    one_bug = [counts[s.name] for s in chosen if s.one_bug]
    print(
        f"{len(one_bug)} files with one bug, at {WIDTH} columns: median "
        f"{statistics.median(one_bug):g} lines, max {max(one_bug)}"
    )
    over = [
        (s.name, counts[s.name])
        for s in chosen
        if counts[s.name] > (REPORT_LINES_ONE_BUG if s.one_bug else SCREEN_LINES)
    ]
    for s in chosen:
        if not s.one_bug:
            print(f"{s.name}: {counts[s.name]} lines (bound {SCREEN_LINES})")
    print(
        f"over the bound ({REPORT_LINES_ONE_BUG} for one bug, {SCREEN_LINES} otherwise): "
        + (", ".join(f"{name} ({n})" for name, n in over) or "none")
    )
    return 1 if over else 0


if __name__ == "__main__":
    raise SystemExit(main())
