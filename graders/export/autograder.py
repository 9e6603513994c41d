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
  top-level `output` says which. In the process fallback a root run_autograder runs the grade
  as GRADER_UID, a user who owns nothing but the grade's scratch folder: the submission, which
  runs as that user, cannot write the kata's installed files (the next grade would import
  them), the bundle, or /autograder/results.
- A hidden assignment grades twice: the public cases, visible at once and worth no points
  (feedback), then the hidden graders with the assignment's seed and private graders, whose
  tests, summary and score are `after_published`. A public assignment grades once, visible.
- A grade the kata itself broke (exit 4, or no results.json) is the autograder's failure, not
  the student's: nothing is written, the kata's output goes to stdout (which Gradescope shows
  the instructor), and the exit code is 1, so that Gradescope reports it and it can be re-run.
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
from graders.judge.isolation import bwrap_problem
from graders.shared import rubric as rubric_data
from graders.shared import tracks
from graders.shared.output_files import write_atomically
from graders.shared.tracks import Track
from graders.shared.untrusted import file_name, quote

# One grade's wall clock: a submission that hangs in every item takes about 50 s a grade (the
# kata stops after three hung items), so this is a backstop, under Gradescope's default limit
# of 10 minutes for both grades of a hidden assignment.
GRADE_SECONDS = 270
BROKEN = 4  # kata grade's exit code when the kata itself broke (contract, section 3)
GRADER_UID = 65534  # 'nobody' on Debian and Ubuntu; a numeric id needs no account
ISOLATION_LINES = {
    "bwrap": "Isolation: bubblewrap (the submission ran in a sandbox of its own in this "
             "container).",
    "process": "Isolation: process (bubblewrap cannot make namespaces in this container: the "
               "container, made afresh for this submission, is the sandbox).",
}
UNPRIVILEGED = (" The submission ran as an unprivileged user, who can write none of the "
                "grader's files.")


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
        raise NotGraded(f"More than one file could be the implementation ({shown}): submit "
                        f"one, named {track.implementation}.")
    tests = named[0].parent / track.tests if track.tests else None
    return named[0], tests if tests and tests.is_file() and not tests.is_symlink() else None


def isolation() -> str:
    """'bwrap' where bubblewrap can make its namespaces here, else 'process'."""
    return "bwrap" if bwrap_problem() is None else "process"


def grader_uid(isolated: str) -> int | None:
    """The user a grade runs as: GRADER_UID in the process fallback of a root run_autograder,
    else None (this process's user: bubblewrap gives each sandbox a user of its own)."""
    return GRADER_UID if isolated == "process" and os.geteuid() == 0 else None


def isolation_line(isolated: str) -> str:
    """What the results say of the isolation of a grade that ran."""
    return ISOLATION_LINES[isolated] + (UNPRIVILEGED if grader_uid(isolated) else "")


def ungraded(track: Track, reason: str, isolated: str) -> dict:
    """The results of a submission that was not graded: every item of `track` failed, 0 points,
    with `reason`."""
    rubric = rubric_data.load()
    order = {item.id: n for n, item in enumerate(rubric.items, start=1)}
    tests = [{"name": f"{item.level} {item.id}: {item.title}", "number": str(order[item.id]),
              "score": 0.0, "max_score": item.points, "status": "failed",
              "output": f"Not graded: {reason}", "visibility": "visible", "tags": [item.level]}
             for item in rubric.track(track)]
    return {"score": 0.0, "execution_time": 0.0, "visibility": "visible",
            "stdout_visibility": "hidden", "output": f"{reason}\n{ISOLATION_LINES[isolated]}",
            "tests": tests}


def grade(implementation: Path, tests: Path | None, assignment: Assignment, source: Path,
          isolated: str, hidden: bool) -> dict | None:
    """results.json of one `kata grade` of the files (copied into a scratch folder first, with
    the private graders of a hidden grade), or None when the kata itself broke. Raises
    NotGraded when the grade did not finish in time."""
    track = tracks.get(assignment.track)
    with tempfile.TemporaryDirectory(prefix="kvkata-submission-") as scratch:
        work = Path(scratch)
        shutil.copyfile(implementation, work / track.implementation)
        if tests is not None:
            shutil.copyfile(tests, work / track.tests)
        if hidden and assignment.private_graders:  # a copy the grade's user can read
            shutil.copytree(source / PRIVATE_GRADERS, work / "private-graders")
        results = work / "results.json"
        grader = grader_uid(isolated)
        if grader is not None:
            for path in (work, *work.rglob("*")):
                os.chown(path, grader, grader)
        argv = [sys.executable, "-I", "-c", "from cli import main; main()", "grade",
                track.implementation, "--track", track.id, "--format", "gradescope",
                "--json", str(results), "--sandbox", "require" if isolated == "bwrap" else
                "process", "-q"]
        if hidden:
            argv += ["--hidden"] + (["--seed", str(assignment.seed)]
                                    if assignment.seed is not None else [])
            if assignment.private_graders:
                argv += ["--graders", str(work / "private-graders")]
        # A session of its own, so that a grade past its time is stopped with its workers.
        try:
            kata = subprocess.Popen(argv, cwd=work, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True, **_as_user(grader, work))
        except OSError as exc:  # the venv's Python not usable by GRADER_UID: never run as root
            print(f"run_autograder: cannot run the grade as user {grader}: {exc}")
            return None
        try:
            shown, _ = kata.communicate(timeout=GRADE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(kata.pid, signal.SIGKILL)
            kata.communicate()
            raise NotGraded(f"The grade did not finish within {GRADE_SECONDS} s.") from None
        print(f"$ kata {' '.join(argv[4:])}\n{shown}(exit {kata.returncode})")
        if kata.returncode == BROKEN or not results.is_file():
            return None
        return json.loads(results.read_text())


def _as_user(uid: int | None, home: Path) -> dict:
    """subprocess.Popen's arguments that run a process as `uid` (its group alike, no other
    group) with `home` as its home; none for None (the process runs as this one)."""
    if uid is None:
        return {}
    return {"user": uid, "group": uid, "extra_groups": [],
            "env": {**os.environ, "HOME": str(home), "USER": "nobody", "LOGNAME": "nobody"}}


def merged(public: dict, hidden: dict | None, assignment: Assignment, isolated: str) -> dict:
    """One results.json from the public grade and, for a hidden assignment, the hidden one."""
    output = f"{public['output']}\n{isolation_line(isolated)}"
    if hidden is None:
        return {**public, "output": output}
    seed = "a fresh seed" if assignment.seed is None else f"seed {assignment.seed}"
    feedback = [{**test, "name": f"{test['name']} (public cases)", "score": 0.0,
                 "max_score": 0.0, "visibility": "visible",
                 "output": f"{test['output']}\n\n(Feedback: the points come from the hidden "
                           "cases, shown when grades are published.)"}
                for test in public["tests"]]
    graded = [{**test, "name": f"{test['name']} (hidden cases)", "visibility": "after_published"}
              for test in hidden["tests"]]
    passed = all(test["status"] == "passed" for test in hidden["tests"])
    summary = {"name": f"Hidden cases ({seed}): summary", "score": 0.0, "max_score": 0.0,
               "status": "passed" if passed else "failed", "output": hidden["output"],
               "visibility": "after_published"}
    return {**hidden, "visibility": "after_published",
            "output": (f"Public cases: {public['output']}\nHidden cases ({seed}): graded; their "
                       f"results show when grades are published.\n{isolation_line(isolated)}"),
            "tests": feedback + graded + [summary]}


def run(root: Path) -> int:
    """Grade the submission under `root` (/autograder) and write its results.json; 0 when
    written, 1 when the kata broke (nothing written)."""
    started = monotonic()
    assignment = Assignment.read(root / "source" / SETTINGS)
    track = tracks.get(assignment.track)
    isolated = isolation()
    try:
        implementation, tests = find_submission(root / "submission", track)
        graded = [grade(implementation, tests, assignment, root / "source", isolated, hidden)
                  for hidden in ([False, True] if assignment.hidden else [False])]
    except NotGraded as exc:
        results = ungraded(track, quote(str(exc)), isolated)
    else:
        if any(g is None for g in graded):
            print("run_autograder: the kata itself broke (not the submission's fault): "
                  "nothing written, re-run this submission")
            return 1
        results = merged(graded[0], graded[1] if assignment.hidden else None, assignment,
                         isolated)
    results["execution_time"] = round(monotonic() - started, 1)
    (root / "results").mkdir(parents=True, exist_ok=True)
    write_atomically(root / "results" / "results.json", json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1] if len(sys.argv) > 1 else "/autograder")))
