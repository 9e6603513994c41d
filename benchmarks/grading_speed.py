"""How long a grade takes, as the user waits for it: whole `kata` processes against one
`python -c "import torch"`, interleaved (benchmarks.timing), with the ratios issue 14 sets goals
for. Run from the kata's folder:

    python -m benchmarks.grading_speed            # 5 repetitions of each
    python -m benchmarks.grading_speed --reps 9

A grade cannot be faster than one torch import (the candidate's worker needs torch); the ratio
says how much more it costs. "re-grade in --watch" is the time from a save to the next report of
a `kata grade --watch` left running (its workers started ahead, while no one saves); "save in
kata interview" the same for a `kata interview` session past its last stage opening (every item
graded, as late in an interview; issue 33's goal: 0.8x). "grade --track batching" grades the
batching track's solution, the kata's model replaying each of its runs in the judge (issue
34's goal: 3x, hidden cases included). The command timed after either of the two saves waits
SETTLE_SECONDS first, untimed: the watch's and the session's next workers import torch right
after each report, and a command timed meanwhile (the import of torch itself, the other save)
would share the two cores with them. No test asserts these figures: they are for reading.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.timing import Summary, interleaved

ROOT = Path(__file__).resolve().parent.parent
GOALS = {
    "grade": 2.5,
    "grade --hidden": 3.5,
    "grade --item prefix-equivalence": 1.5,
    "re-grade in --watch": 1.0,
    "save in kata interview": 0.8,
    "grade --track batching": 3.0,
    "grade --track batching --hidden": 3.0,
}
# What the real-model item may add to a public grade (issue 43), in torch imports: its two
# workers import transformers while the other items run ("grade" against "grade but
# real-model", every other item of the track named with --item).
MODEL_GOAL = 1.5
MODEL_ITEM = "real-model"
SETTLE_SECONDS = 3.0  # after its first report, for a watch's next workers to import torch


def commands() -> dict[str, list[str]]:
    """The timed commands, by label; each grades the reference solution and its tests (the
    batching track: the solution's scheduler), run in a folder that holds copies of them, as a
    candidate's workspace would."""
    kata = [sys.executable, str(ROOT / "cli.py")]
    return {
        "import torch": [sys.executable, "-c", "import torch"],
        "grade": [*kata, "grade", "kv_cache.py"],
        "grade --level L6": [*kata, "grade", "kv_cache.py", "--level", "L6"],
        "grade but real-model": [*kata, "grade", "kv_cache.py", *_items_but(MODEL_ITEM)],
        "grade --hidden": [*kata, "grade", "kv_cache.py", "--hidden"],
        "grade --item prefix-equivalence": [
            *kata,
            "grade",
            "kv_cache.py",
            "--item",
            "prefix-equivalence",
        ],
        "grade --track batching": [*kata, "grade", "scheduler.py", "--track", "batching"],
        "grade --track batching --hidden": [
            *kata,
            "grade",
            "scheduler.py",
            "--track",
            "batching",
            "--hidden",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="repetitions of each command")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="LABEL",
        help="time these commands alone (with import torch): e.g. grade "
        "'grade but real-model' for the real-model item's cost",
    )
    args = parser.parse_args()
    reps = args.reps
    with tempfile.TemporaryDirectory(prefix="kata-grading-speed-") as folder:
        workspace, watched = Path(folder, "workspace"), Path(folder, "watched")
        interviewed = Path(folder, "interviewed")
        for place in (workspace, watched, interviewed):
            place.mkdir()
            shutil.copy(ROOT / "solutions" / "kv_cache.py", place / "kv_cache.py")
            shutil.copy(ROOT / "solutions" / "test_kv_cache.py", place / "test_kv_cache.py")
        shutil.copy(ROOT / "solutions" / "scheduler.py", workspace / "scheduler.py")
        runs = {
            label: _runner(argv, workspace)
            for label, argv in commands().items()
            if not args.only or label in (*args.only, "import torch")
        }
        if args.only:
            seconds = interleaved(runs, reps)
        else:
            with _Watch(watched) as watch, _Interview(interviewed) as interview:
                runs["re-grade in --watch"] = watch.save_and_wait
                runs["save in kata interview"] = interview.save_and_wait
                seconds = interleaved(runs, reps, before=_settler())
    torch_import = Summary.of(seconds["import torch"]).median
    from benchmarks.machine import facts

    machine = facts()
    print(
        f"CPU: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, load average "
        f"{os.getloadavg()[0]:.1f}; torch {machine['torch']}, transformers "
        f"{machine['transformers']}"
    )
    print(f"{'command':<34} {'median s':>9} {'spread':>7} {'x import torch':>15} {'goal':>6}")
    for label, times in seconds.items():
        summary = Summary.of(times)
        goal = f"{GOALS[label]:.1f}x" if label in GOALS else ""
        print(
            f"{label:<34} {summary.median:9.2f} {summary.spread:6.0%} "
            f"{summary.median / torch_import:14.2f}x {goal:>6}"
        )
    grade = Summary.of(seconds["grade"]).median if "grade" in seconds else None
    if grade is not None and "grade --level L6" in seconds:
        more = grade - Summary.of(seconds["grade --level L6"]).median
        print(
            f"the L6+ items' cost (grade - grade --level L6): {more:.2f} s, "
            f"{more / torch_import:.2f}x import torch"
        )
    if grade is not None and "grade but real-model" in seconds:  # its two workers, its runs
        more = grade - Summary.of(seconds["grade but real-model"]).median
        print(
            f"{MODEL_ITEM}'s cost (grade - grade but real-model): {more:.2f} s, "
            f"{more / torch_import:.2f}x import torch (goal: {MODEL_GOAL:.1f}x)"
        )


def _items_but(left_out: str) -> list[str]:
    """--item for every item of the dense track but `left_out`."""
    from graders.shared.rubric import load
    from graders.shared.tracks import DENSE

    ids = [i.id for i in load().items if DENSE.owns(i.level) and i.id != left_out]
    return [arg for item in ids for arg in ("--item", item)]


def _settler():
    """The `before` of the interleaved runs: after a watched save, let its next workers finish
    their torch import before the next command is timed (a `kata grade` run leaves nothing
    running behind it)."""
    last = [""]

    def settle(label: str) -> None:
        if last[0] in ("re-grade in --watch", "save in kata interview"):
            time.sleep(SETTLE_SECONDS)
        last[0] = label

    return settle


def _runner(argv: list[str], cwd: Path):
    def run() -> None:
        done = subprocess.run(argv, cwd=cwd, capture_output=True)
        if done.returncode != 0:
            raise SystemExit(
                f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout.decode()}"
                f"{done.stderr.decode()}"
            )

    return run


class _Watch:
    """`kata grade kv_cache.py --watch` running in `folder`; `save_and_wait()` saves the file
    and returns once the report of that save is out."""

    argv = ["grade", "kv_cache.py", "--watch"]
    report_end = "Score:"  # the last line of each report
    stop = signal.SIGINT

    def __init__(self, folder: Path):
        self.file, self.log = folder / "kv_cache.py", folder.parent / f"{folder.name}.log"
        self.saves = 0

    def __enter__(self) -> "_Watch":
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), *self.argv],
            cwd=self.file.parent,
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_for_report(1)
        time.sleep(SETTLE_SECONDS)
        return self

    def save_and_wait(self) -> None:
        self.saves += 1
        with self.file.open("a") as file:
            file.write(f"# save {self.saves}\n")
        self._wait_for_report(self.saves + 1)

    def _wait_for_report(self, count: int) -> None:
        while self.log.read_text().count(self.report_end) < count:
            if self.process.poll() is not None:
                raise SystemExit(f"kata {' '.join(self.argv)} exited:\n{self.log.read_text()}")
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        os.killpg(self.process.pid, self.stop)
        self.process.wait()


class _Interview(_Watch):
    """`kata interview` running in `folder` on the reference, brought past its stages (its first
    save opens L5, its second L6) before it is timed, so that each timed save grades every item;
    killed at the end, so that no final grade runs."""

    argv = ["interview", "."]
    report_end = " saves]"  # the status line that closes each save
    stop = signal.SIGKILL

    def __enter__(self) -> "_Interview":
        super().__enter__()
        for _ in range(2):
            self.save_and_wait()
        time.sleep(SETTLE_SECONDS)
        return self


if __name__ == "__main__":
    main()
