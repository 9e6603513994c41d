"""What run_autograder does for one submission, in Gradescope's container.

`python -m graders.export.autograder ROOT` (ROOT is /autograder): read the assignment's settings
from ROOT/source, find the submitted file in ROOT/submission, grade it with `kata grade
--format gradescope` in a child process, and write ROOT/results/results.json.

- The file: the track's file name (kv_cache.py) anywhere in the submission, else the only `.py`
  file that is not a test file. Its test file (test_kv_cache.py) is graded beside it when
  submitted. Only regular files count: a symbolic link is never followed. Both are copied into a
  scratch folder and graded there, so the submission is never written.
- No file, two candidates, or a grade that did not finish within GRADE_SECONDS: a graded result,
  every item of the track failed with 0 points and a message saying why.
- Isolation: bubblewrap where it can make its namespaces (`--sandbox require`); where it cannot,
  as in a container that forbids them, the container Gradescope makes afresh for each
  submission is the sandbox and the grade runs with `--sandbox process`, on purpose. The
  top-level `output` says which. Either way the judge (`kata grade`) runs as run_autograder's
  own user, root in Gradescope's container, and the submission as a user of its own
  (graders.judge.isolation: `WorkerFolder`, bubblewrap's `setpriv`): before the grades,
  run_autograder closes the bundle (the settings and their seed, the private graders) to every
  other user and makes results/ writable by root alone; each grade runs in a scratch folder of
  root's alone, and is handed its arguments on stdin, so that no command line shows the seed.
- A hidden assignment grades twice: the public cases, visible at once and worth no points
  (feedback), then the hidden graders with the assignment's seed and private graders, whose
  tests, summary and score are `after_published`. A public assignment grades once, visible.
- results.json is always run_autograder's own, written last: the grades' results, merged, or,
  for a grade that did not produce its own (the kata broke: exit 4, a signal, no file), a
  result that says so (score 0, one failed test naming the failure), and exit code 1, so that
  Gradescope shows the instructor a run to re-run. The kata's output goes to stdout (which
  Gradescope shows the instructor).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from time import monotonic

from graders.export.gradescope import PRIVATE_GRADERS, SETTINGS, Assignment
from graders.judge.isolation import bwrap_problem, worker_user_problem
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.output_files import write_atomically
from graders.shared.tracks import Track
from graders.shared.untrusted import file_name, quote

# One grade's wall clock, a backstop: every grade ends within its time budget
# (graders.judge.request.TimeBudget: 150 s public, 240 s hidden), and this leaves the kata 40 s
# more to start and write its results; both grades of a hidden assignment stay under
# Gradescope's default limit of 10 minutes.
GRADE_SECONDS = 280
# The command a grade runs: `kata grade`, its arguments read from the first line of stdin (a
# JSON list), so that no command line in /proc, which every user may read, shows the seed.
KATA_COMMAND = (
    "import json, sys; sys.argv[1:] = json.loads(sys.stdin.readline()); "
    "from cli import main; main()"
)
GRADED_CODES = (0, 1)  # kata grade's exit codes when it graded (contract, section 3)
ISOLATION_LINES = {
    "bwrap": "Isolation: bubblewrap (the submission ran in a sandbox of its own in this "
    "container).",
    "process": "Isolation: process (bubblewrap cannot make namespaces in this container: the "
    "container, made afresh for this submission, is the sandbox).",
}
UNPRIVILEGED = (
    " The submission ran as a user of its own, who can write none of the grader's "
    "files and read neither its private graders nor its seed."
)


class NotGraded(Exception):
    """The submission holds no file to grade or more than one, or its grade did not finish in
    time; the message says so, to the student."""


def find_submission(folder: Path, track: Track) -> tuple[Path, Path | None]:
    """(the implementation, its test file or None) submitted in `folder`; NotGraded when there
    is none or more than one candidate."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    named = [p for p in files if p.name == track.implementation]
    if not named:
        named = [p for p in files if p.suffix == ".py" and not p.name.startswith("test_")]
    if not named:
        raise NotGraded(f"No {track.implementation} was submitted (and no other .py file).")
    if len(named) > 1:
        shown = ", ".join(file_name(p.relative_to(folder).as_posix()) for p in named[:10])
        raise NotGraded(
            f"More than one file could be the implementation ({shown}): submit "
            f"one, named {track.implementation}."
        )
    tests = named[0].parent / track.tests if track.tests else None
    return named[0], tests if tests and tests.is_file() and not tests.is_symlink() else None


def isolation() -> str:
    """'bwrap' where bubblewrap can make its namespaces here, else 'process'."""
    return "bwrap" if bwrap_problem() is None else "process"


def isolation_line(isolated: str) -> str:
    """What the results say of the isolation of a grade that ran: as root (Gradescope's
    container), whether the submission ran as a user of its own."""
    if isolated == "bwrap" and os.geteuid() != 0:  # a user namespace: the sandbox hides the rest
        return ISOLATION_LINES[isolated]
    if isolated == "bwrap" or worker_user_problem() is None:
        return ISOLATION_LINES[isolated] + UNPRIVILEGED
    return (
        f"{ISOLATION_LINES[isolated]} The submission ran as the grader's own user: "
        f"{worker_user_problem()}."
    )


def ungraded(track: Track, reason: str, isolated: str) -> dict:
    """The results of a submission that was not graded: every item of `track` failed, 0 points,
    with `reason` (but L6+'s, not started: no test each, as in a grade)."""
    rubric = rubric_data.load()
    order = {item.id: n for n, item in enumerate(rubric.items, start=1)}
    tests = [
        {
            "name": f"{item.level} {item.id}: {item.title}",
            "number": str(order[item.id]),
            "score": 0.0,
            "max_score": item.points,
            "status": "failed",
            "output": f"Not graded: {reason}",
            "visibility": "visible",
            "tags": [item.level],
        }
        for item in rubric.track(track)
        if item.level != rubric_data.PLUS
    ]
    return {
        "score": 0.0,
        "execution_time": 0.0,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "output": f"{reason}\n{ISOLATION_LINES[isolated]}",
        "tests": tests,
    }


class GradeFailed(Exception):
    """A grade that did not produce its results (the kata broke, not the submission): the
    message says how, to the instructor."""


def failed(track: Track, reason: str, isolated: str) -> dict:
    """The results of a submission whose grade did not produce its own: score 0, one failed
    test naming the failure, visible."""
    points = sum(
        item.points for item in rubric_data.load().track(track) if item.level != rubric_data.PLUS
    )  # the 100: L6+'s are outside it
    return {
        "score": 0.0,
        "execution_time": 0.0,
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "output": f"{reason}\n{ISOLATION_LINES[isolated]}",
        "tests": [
            {
                "name": "The autograder could not grade this submission",
                "score": 0.0,
                "max_score": points,
                "status": "failed",
                "output": reason,
                "visibility": "visible",
            }
        ],
    }


def grade(
    implementation: Path,
    tests: Path | None,
    assignment: Assignment,
    source: Path,
    isolated: str,
    hidden: bool,
) -> dict:
    """results.json of one `kata grade` of the files, copied first into a scratch folder of this
    user's alone with the private graders of a hidden grade. Raises NotGraded when the grade did
    not finish in time, GradeFailed when it did not produce its results."""
    track = tracks.get(assignment.track)
    cases = "hidden" if hidden else "public"
    with tempfile.TemporaryDirectory(prefix="kvkata-submission-") as scratch:  # mode 700
        work = Path(scratch)
        shutil.copyfile(implementation, work / track.implementation)
        if tests is not None:
            shutil.copyfile(tests, work / track.tests)
        if hidden and assignment.private_graders:
            shutil.copytree(source / PRIVATE_GRADERS, work / "private-graders")
        results = work / "results.json"
        argv = [
            "grade",
            track.implementation,
            "--track",
            track.id,
            "--format",
            "gradescope",
            "--json",
            str(results),
            "--sandbox",
            "require" if isolated == "bwrap" else "process",
            "-q",
        ]
        if hidden:
            argv += ["--hidden"] + (
                ["--seed", str(assignment.seed)] if assignment.seed is not None else []
            )
            if assignment.private_graders:
                argv += ["--graders", str(work / "private-graders")]
        # A session of its own, so that a grade past its time is stopped with its workers.
        kata = subprocess.Popen(
            [sys.executable, "-I", "-c", KATA_COMMAND],
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        try:
            shown, _ = kata.communicate(json.dumps(argv) + "\n", timeout=GRADE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(kata.pid, signal.SIGKILL)
            kata.communicate()
            raise NotGraded(f"The grade did not finish within {GRADE_SECONDS} s.") from None
        print(f"$ kata {' '.join(argv)}\n{shown}(exit {kata.returncode})")
        if kata.returncode not in GRADED_CODES:
            raise GradeFailed(
                f"The grade of the {cases} cases ended with exit code "
                f"{kata.returncode} (the kata itself broke, not the submission): "
                "re-run this submission."
            )
        if results.is_symlink() or not results.is_file():
            raise GradeFailed(
                f"The grade of the {cases} cases wrote no results: re-run this submission."
            )
        return json.loads(results.read_text())


def close_to_the_submission(root: Path) -> None:
    """As root: the bundle (source/: the settings and their seed, the private graders) readable
    by root alone, and results/ writable by root alone, before any submission code runs."""
    if os.geteuid() != 0:
        return
    (root / "source").chmod(0o700)
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    os.chown(results, 0, 0)
    results.chmod(0o755)
    stale = results / "results.json"
    if stale.is_symlink() or stale.exists():
        stale.unlink()


def merged(public: dict, hidden: dict | None, assignment: Assignment, isolated: str) -> dict:
    """One results.json from the public grade and, for a hidden assignment, the hidden one."""
    output = f"{public['output']}\n{isolation_line(isolated)}"
    if hidden is None:
        return {**public, "output": output}
    seed = "a fresh seed" if assignment.seed is None else f"seed {assignment.seed}"
    feedback = [
        {
            **test,
            "name": f"{test['name']} (public cases)",
            "score": 0.0,
            "max_score": 0.0,
            "visibility": "visible",
            "output": f"{test['output']}\n\n(Feedback: the points come from the hidden "
            "cases, shown when grades are published.)",
        }
        for test in public["tests"]
    ]
    graded = [
        {**test, "name": f"{test['name']} (hidden cases)", "visibility": "after_published"}
        for test in hidden["tests"]
    ]
    passed = all(test["status"] == "passed" for test in hidden["tests"])
    summary = {
        "name": f"Hidden cases ({seed}): summary",
        "score": 0.0,
        "max_score": 0.0,
        "status": "passed" if passed else "failed",
        "output": hidden["output"],
        "visibility": "after_published",
    }
    return {
        **hidden,
        "visibility": "after_published",
        "output": (
            f"Public cases: {public['output']}\nHidden cases ({seed}): graded; their "
            f"results show when grades are published.\n{isolation_line(isolated)}"
        ),
        "tests": feedback + graded + [summary],
    }


def run(root: Path) -> int:
    """Grade the submission under `root` (/autograder) and write its results.json; 0 when
    graded, 1 when a grade did not produce its results (results.json says so)."""
    started = monotonic()
    assignment = Assignment.read(root / "source" / SETTINGS)
    close_to_the_submission(root)
    track = tracks.get(assignment.track)
    isolated = isolation()
    code = 0
    try:
        implementation, tests = find_submission(root / "submission", track)
        graded = [
            grade(implementation, tests, assignment, root / "source", isolated, hidden)
            for hidden in ([False, True] if assignment.hidden else [False])
        ]
    except NotGraded as exc:
        results = ungraded(track, quote(str(exc)), isolated)
    except GradeFailed as exc:
        print(f"run_autograder: {exc}")
        results, code = failed(track, str(exc), isolated), 1
    else:
        results = merged(graded[0], graded[1] if assignment.hidden else None, assignment, isolated)
    results["execution_time"] = round(monotonic() - started, 1)
    (root / "results").mkdir(parents=True, exist_ok=True)
    write_atomically(root / "results" / "results.json", json.dumps(results, indent=2) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1] if len(sys.argv) > 1 else "/autograder")))
