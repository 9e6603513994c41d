"""Proof that a refactor of the grade's path moves code and changes no report (issue 41).

Grades, through `kata grade` (cli.py), every file a grade is tested on: solutions/*.py (each on
its track), every file of tests/implementations and every entry of tests/wrong, public and
hidden (--hidden --seed SEED), and writes each report's JSON and terminal text into a folder,
with temporary paths and timings normalised. Run it before a change and after, then compare:

    python -m benchmarks.same_reports OUT                # grade everything into OUT
    python -m benchmarks.same_reports --compare A B      # the reports that differ, and figures

Each file is copied into a fresh temporary folder under its track's contract name (as
tests/wrong's `Wrong.write` does); solutions/kv_cache.py takes solutions/test_kv_cache.py
beside it, so that its own tests run. The grades run in the process sandbox, one at a time in
one process (run the two trees' at once: two grades on a 2-core machine).
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parent.parent
SEED = 4242
WIDTH = 100
TRACK_OF_SOLUTION = {
    "kv_cache.py": "dense",
    "concat_kv_cache.py": "dense",
    "paged_kv_cache.py": "serving",
    "scheduler.py": "batching",
}
IMPLEMENTATION = {
    "dense": "kv_cache.py",
    "serving": "paged_kv_cache.py",
    "batching": "scheduler.py",
}


@dataclass(frozen=True)
class Subject:
    """One file to grade: `name` (unique, a file name in the output folder), its `track`, its
    source, and the candidate's tests beside it (None: no test file)."""

    name: str
    track: str
    source: str
    tests: str | None = None


def subjects() -> list[Subject]:
    """The solutions, tests/implementations and tests/wrong, in that order."""
    found = []
    tests = (ROOT / "solutions" / "test_kv_cache.py").read_text()
    for path in sorted((ROOT / "solutions").glob("*.py")):
        if path.name in TRACK_OF_SOLUTION:
            found.append(
                Subject(
                    f"solutions.{path.stem}",
                    TRACK_OF_SOLUTION[path.name],
                    path.read_text(),
                    tests if path.name == "kv_cache.py" else None,
                )
            )
    folder = ROOT / "tests" / "implementations"
    for path in sorted(folder.rglob("*.py")):
        relative = path.relative_to(folder)
        track = (
            "batching"
            if relative.parts[0] == "batching"
            else "serving"
            if path.name.startswith("paged_")
            else "dense"
        )
        found.append(
            Subject(
                "implementations." + ".".join(relative.with_suffix("").parts),
                track,
                path.read_text(),
            )
        )
    sys.path.insert(0, str(ROOT))
    from graders.shared.mutation import Mutant
    from tests.wrong import everything

    for wrong in everything():
        impl = wrong.implementation
        source = impl.source() if isinstance(impl, Mutant) else impl.read_text()
        found.append(Subject(f"wrong.{wrong.name}", wrong.track.id, source))
    return found


def normalise(text: str, folder: Path) -> str:
    """`text` with the temporary folder, the seed-free timings and the run's clock removed."""
    text = text.replace(str(folder.resolve()), "<TMP>").replace(str(folder), "<TMP>")
    text = re.sub(r"/tmp/[\w./-]+", "<TMP-PATH>", text)
    text = re.sub(r"\b\d+(\.\d+)?\s?(ms|s)\b", "<T>", text)  # durations
    text = re.sub(
        r'"(duration|elapsed|seconds|time|started|ended|date)": [^,\n}]+', r'"\1": <T>', text
    )
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[.\d]*(Z|[+-]\d\d:?\d\d)?", "<DATE>", text)


def grade_one(subject: Subject, hidden: bool, out: Path) -> float:
    """Grade `subject` with `kata grade` (cli.app, in this process), write
    `<name>.<public|hidden>.{json,txt}` in `out`; the seconds it took."""
    import cli

    kind = "hidden" if hidden else "public"
    with tempfile.TemporaryDirectory(prefix="same-reports-") as temporary:
        folder = Path(temporary)
        implementation = folder / IMPLEMENTATION[subject.track]
        implementation.write_text(subject.source)
        if subject.tests is not None:
            (folder / "test_kv_cache.py").write_text(subject.tests)
        report = folder / "report.json"
        argv = [
            "grade",
            str(implementation),
            "--track",
            subject.track,
            "--json",
            str(report),
            "--sandbox",
            "process",
        ]
        if hidden:
            argv += ["--hidden", "--seed", str(SEED)]
        streams = {False: io.StringIO(), True: io.StringIO()}
        cli._console = lambda stderr=False: Console(
            file=streams[stderr], width=WIDTH, highlight=False
        )
        start, here = time.perf_counter(), os.getcwd()
        os.chdir(folder)  # as `kata grade` is run in the candidate's folder
        try:
            code = cli.app(argv, standalone_mode=False)
        except SystemExit as exc:
            code = exc.code
        finally:
            os.chdir(here)
        seconds = time.perf_counter() - start
        json_text = report.read_text() if report.is_file() else "(no report)\n"
        terminal = (
            f"exit {code}\n--- stdout\n{streams[False].getvalue()}\n--- stderr\n"
            f"{streams[True].getvalue()}"
        )
        (out / f"{subject.name}.{kind}.json").write_text(normalise(json_text, folder))
        (out / f"{subject.name}.{kind}.txt").write_text(normalise(terminal, folder))
    return seconds


def run(out: Path, only: str | None) -> int:
    """Every subject graded public then hidden (but those `out` holds already: a run
    interrupted goes on where it stopped), one grade at a time, the process-isolated
    workers forked from one warm process (graders.judge.workers.warm_workers): a fresh
    interpreter a grade would spend most of its time importing torch."""
    from graders.judge.workers import warm_workers

    out.mkdir(parents=True, exist_ok=True)
    jobs = [
        (s, hidden)
        for s in subjects()
        if only is None or only in s.name
        for hidden in (False, True)
        if not (out / f"{s.name}.{'hidden' if hidden else 'public'}.txt").is_file()
    ]
    start = time.perf_counter()
    with warm_workers():
        seconds = [grade_one(*job, out) for job in jobs]
    print(
        f"{len(jobs)} grades into {out}: "
        f"{time.perf_counter() - start:.0f} s on the clock, {sum(seconds):.0f} s of grades"
    )
    return 0


def compare(before: Path, after: Path) -> int:
    """Print each report that differs (a unified diff) and the figures; 1 when any differs."""
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    same, differ, missing = 0, [], []
    for name in names:
        a, b = before / name, after / name
        if not (a.is_file() and b.is_file()):
            missing.append(name)
        elif a.read_text() == b.read_text():
            same += 1
        else:
            differ.append(name)
            sys.stdout.writelines(
                difflib.unified_diff(
                    a.read_text().splitlines(True),
                    b.read_text().splitlines(True),
                    str(a),
                    str(b),
                    n=1,
                )
            )
    reports = len(names) // 2
    print(
        f"{len(names)} files ({reports} reports: JSON and terminal text): {same} equal, "
        f"{len(differ)} differ, {len(missing)} only on one side"
        + (f": {', '.join(missing)}" if missing else "")
    )
    return 1 if differ or missing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="The folder to write the reports to.")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    parser.add_argument("--only", help="Only the subjects whose name contains this.")
    args = parser.parse_args()
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("give OUT, or --compare A B")
    return run(args.out, args.only)


if __name__ == "__main__":
    sys.exit(main())
