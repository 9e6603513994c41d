"""`kata export`: the Gradescope autograder bundle, tested as Gradescope runs it, and the GitHub
Actions workflow, its steps run here.

As Gradescope runs it (the slow tests): the bundle is made by the CLI, unpacked into a folder
standing for /autograder (source/, submission/, results/), setup.sh installs the kata into a
fresh venv (KVKATA_VENV; its system steps skipped, as Python and bubblewrap are here; torch
from this machine's pip configuration, KVKATA_TORCH_INDEX empty), and run_autograder runs in
bubblewrap with that folder bound at /autograder, in a PID namespace of its own, as in a
container: what is left in it once run_autograder returns is listed (AFTER_THE_RUN). Every
results.json is checked against Gradescope's documented schema (GRADESCOPE_SCHEMA).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from graders.export import autograder, github_action, gradescope
from graders.export.gradescope import Assignment
from graders.shared import rubric as rubric_data
from graders.shared.tracks import DENSE, MODEL_ITEM, SERVING

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_ITEM = "reset"  # the bundled private grader fails it for everyone (hidden grade only)
HOSTILE = Path(__file__).parent / "hostile"
runner = CliRunner()
SEED = 11
ASSIGNMENT = Assignment(
    track="dense", hidden=True, seed=SEED, torch="2.13.0", private_graders=False
)

# Gradescope's autograder specification, results.json: the top level may hold `score` (optional
# when the tests give scores), `execution_time`, `output`, `visibility`, `stdout_visibility`,
# `extra_data`, `tests` and `leaderboard`; each test `score`, `max_score`, `status` ("passed"
# or "failed"), `name`, `number`, `output`, `tags`, `visibility` (below), `extra_data`.
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
TOP_LEVEL = {
    "score": (int, float),
    "execution_time": (int, float),
    "output": str,
    "visibility": str,
    "stdout_visibility": str,
    "extra_data": dict,
    "tests": list,
    "leaderboard": list,
}
TEST_FIELDS = {
    "score": (int, float),
    "max_score": (int, float),
    "status": str,
    "name": str,
    "number": str,
    "output": str,
    "tags": list,
    "visibility": str,
    "extra_data": dict,
}
# What this kata promises beyond the schema's optional fields: the list.
REQUIRED_TOP = {"score", "execution_time", "output", "tests"}
REQUIRED_TEST = {"name", "score", "max_score", "status", "output", "visibility"}


def check_gradescope_schema(results: dict) -> None:
    """Assert that `results` is a results.json as Gradescope documents it."""
    assert set(results) <= set(TOP_LEVEL), set(results) - set(TOP_LEVEL)
    assert REQUIRED_TOP <= set(results), REQUIRED_TOP - set(results)
    for key, value in results.items():
        assert isinstance(value, TOP_LEVEL[key]), (key, value)
    for key in ("visibility", "stdout_visibility"):
        assert results.get(key, "visible") in VISIBILITIES, results[key]
    assert results["tests"], "no test: Gradescope would show nothing"
    for test in results["tests"]:
        assert set(test) <= set(TEST_FIELDS), set(test) - set(TEST_FIELDS)
        assert REQUIRED_TEST <= set(test), REQUIRED_TEST - set(test)
        for key, value in test.items():
            assert isinstance(value, TEST_FIELDS[key]), (key, value)
        assert test["status"] in ("passed", "failed"), test
        assert test["visibility"] in VISIBILITIES, test
        assert 0 <= test["score"] <= test["max_score"], test
    json.dumps(results, ensure_ascii=False).encode("utf-8")  # valid UTF-8 throughout


def core_items(track=DENSE) -> int:
    """How many items of L4 to L6 (or of a track beside the levels) there are: a grade that does
    not reach L6 lists no L6+ test (not started), a grade that does lists them too."""
    return len([item for item in rubric_data.load().track(track) if item.level != rubric_data.PLUS])


def rubric_points(track=DENSE) -> float:
    """The points of L4 to L6 (or of a track beside the levels): L6+'s are outside the 100."""
    return sum(
        item.points for item in rubric_data.load().track(track) if item.level != rubric_data.PLUS
    )


# --- finding the submitted file ---------------------------------------------------------------


def test_the_tracks_file_is_found_with_its_tests_beside_it(tmp_path):
    (tmp_path / "notes.py").write_text("")
    (tmp_path / "kv_cache.py").write_text("")
    (tmp_path / "test_kv_cache.py").write_text("")
    assert autograder.find_submission(tmp_path, DENSE) == (
        tmp_path / "kv_cache.py",
        tmp_path / "test_kv_cache.py",
    )


def test_the_only_py_file_is_graded_whatever_its_name_and_in_a_subfolder(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "my_cache.py").write_text("")
    (tmp_path / "README.md").write_text("")
    assert autograder.find_submission(tmp_path, DENSE) == (tmp_path / "repo" / "my_cache.py", None)


def test_no_file_and_two_files_are_not_graded_with_a_message(tmp_path):
    with pytest.raises(autograder.NotGraded, match=r"No kv_cache\.py was submitted"):
        autograder.find_submission(tmp_path, DENSE)
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b\x1b[31m.py").write_text("")  # a name the student chose: shown escaped
    with pytest.raises(autograder.NotGraded) as raised:
        autograder.find_submission(tmp_path, DENSE)
    assert "a.py, b\\x1b[31m.py" in str(raised.value) and "\x1b" not in str(raised.value)


def test_a_symbolic_link_is_never_followed(tmp_path):
    """A link named kv_cache.py to a file of the image (a private grader, say) is not graded."""
    secret = tmp_path / "secret.py"
    secret.write_text("")
    submission = tmp_path / "submission"
    submission.mkdir()
    (submission / "kv_cache.py").symlink_to(secret)
    with pytest.raises(autograder.NotGraded, match="No kv_cache.py"):
        autograder.find_submission(submission, DENSE)


def test_the_serving_track_looks_for_its_own_file(tmp_path):
    (tmp_path / "kv_cache.py").write_text("")
    (tmp_path / "paged_kv_cache.py").write_text("")
    assert autograder.find_submission(tmp_path, SERVING) == (tmp_path / "paged_kv_cache.py", None)


# --- results.json ------------------------------------------------------------------------------


def test_an_ungraded_submission_fails_every_item_with_its_points_and_the_reason():
    results = autograder.ungraded(DENSE, "No kv_cache.py was submitted.", "process")
    check_gradescope_schema(results)
    assert results["score"] == 0
    assert [t["name"].split()[1].rstrip(":") for t in results["tests"]] == [
        item.id for item in rubric_data.load().track(DENSE) if item.level != rubric_data.PLUS
    ]
    assert {t["status"] for t in results["tests"]} == {"failed"}
    assert sum(t["max_score"] for t in results["tests"]) == rubric_points() == 100
    assert all(t["output"] == "Not graded: No kv_cache.py was submitted." for t in results["tests"])
    assert "Isolation: process" in results["output"]


def grade_results(score: float, status: str) -> dict:
    """A results.json as `kata grade --format gradescope` writes it, two items."""
    return {
        "score": score,
        "output": f"Level reached: {'L4' if score else 'below L4'}",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {"max_score": 4.0, "level": None, "partial": False},
        "tests": [
            {
                "name": f"L4 {i}: t",
                "number": str(n),
                "score": score / 2,
                "max_score": 2.0,
                "status": status,
                "output": "m",
                "visibility": v,
                "tags": ["L4"],
            }
            for n, (i, v) in enumerate(
                [("append-time-dim", "visible"), ("attend-shape", "visible")], start=1
            )
        ],
    }


def test_a_hidden_assignment_shows_public_feedback_at_once_and_the_grade_when_published():
    public = grade_results(4.0, "passed")
    hidden = grade_results(0.0, "failed")
    for test in hidden["tests"]:
        test["visibility"] = "after_published"
    merged = autograder.merged(public, hidden, ASSIGNMENT, "bwrap")
    merged["execution_time"] = 1.0
    check_gradescope_schema(merged)
    assert merged["score"] == 0.0, "the score is the hidden grade's"
    assert merged["visibility"] == "after_published"
    feedback, graded, summary = merged["tests"][:2], merged["tests"][2:4], merged["tests"][4]
    assert [(t["visibility"], t["status"], t["score"], t["max_score"]) for t in feedback] == [
        ("visible", "passed", 0.0, 0.0)
    ] * 2
    assert all(t["name"].endswith("(public cases)") for t in feedback)
    assert [(t["visibility"], t["status"], t["max_score"]) for t in graded] == [
        ("after_published", "failed", 2.0)
    ] * 2
    assert summary["visibility"] == "after_published" and f"seed {SEED}" in summary["name"]
    assert summary["status"] == "failed", "the hidden grade has items that do not pass"
    assert "below L4" not in merged["output"], "the hidden level shows only when published"
    assert "Level reached: L4" in merged["output"] and "Isolation: bubblewrap" in merged["output"]


def test_a_public_assignment_is_its_grade_visible_with_the_isolation_said():
    public = grade_results(4.0, "passed")
    merged = autograder.merged(public, None, ASSIGNMENT, "process")
    assert merged["tests"] == public["tests"] and merged["score"] == 4.0
    assert merged["output"].endswith(autograder.isolation_line("process"))
    assert autograder.ISOLATION_LINES["process"] in merged["output"]


@pytest.mark.parametrize(
    "command, says",
    [
        ("sys.exit(4)", "ended with exit code 4"),
        ("sys.exit(0)", "wrote no results"),
        ("open('results.json', 'w').write(FORGED); sys.exit(2)", "ended with exit code 2"),
    ],
    ids=["kata-broke", "no-file", "a-file-it-did-not-make"],
)
def test_a_grade_that_writes_no_results_is_a_failure_said_in_results_json(
    command, says, tmp_path, monkeypatch, capsys
):
    """run_autograder takes a grade's results only from a grade that graded (exit 0 or 1) and
    wrote them; else results.json says what failed, score 0, and the exit code is 1. A file in
    the grade's folder after a grade that failed (a forger's, say) is never taken."""
    forged = json.dumps({"score": 100.0, "output": "forged", "tests": []})
    monkeypatch.setattr(
        autograder,
        "KATA_COMMAND",
        f"import sys; sys.stdin.readline(); FORGED = {forged!r}; {command}",
    )
    for folder in ("source", "submission"):
        (tmp_path / folder).mkdir()
    (tmp_path / "source" / gradescope.SETTINGS).write_text(
        json.dumps(
            {
                "track": "dense",
                "hidden": False,
                "seed": None,
                "torch": "2.13.0",
                "private_graders": False,
            }
        )
    )
    (tmp_path / "submission" / "kv_cache.py").write_text("")
    assert autograder.run(tmp_path) == 1
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    check_gradescope_schema(results)
    (test,) = results["tests"]
    assert results["score"] == 0 and test["status"] == "failed" and "forged" not in str(results)
    assert says in test["output"] and says in results["output"], test["output"]
    assert test["max_score"] == rubric_points()
    assert says in capsys.readouterr().out, "the instructor is told too"


# --- the bundle ---------------------------------------------------------------------------------


def test_the_bundle_holds_the_scripts_the_wheel_the_settings_and_the_private_graders(tmp_path):
    wheel = tmp_path / "kvkata-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"a wheel")
    private = tmp_path / "mine"
    (private / "__pycache__").mkdir(parents=True)
    (private / "my_grader.py").write_text("# mine\n")
    (private / "__pycache__" / "my_grader.pyc").write_bytes(b"")
    out = tmp_path / "bundle.zip"
    gradescope.export(out, Assignment("serving", True, 5, "2.13.0", True), private, wheel)
    bundle = zipfile.ZipFile(out)
    assert sorted(bundle.namelist()) == [
        "assignment.json",
        "graders/my_grader.py",
        "kvkata-0.1.0-py3-none-any.whl",
        "run_autograder",
        "setup.sh",
    ]
    modes = {i.filename: stat.S_IMODE(i.external_attr >> 16) for i in bundle.infolist()}
    assert modes["setup.sh"] == modes["run_autograder"] == 0o755
    assert modes["assignment.json"] == 0o644
    assert json.loads(bundle.read("assignment.json")) == {
        "track": "serving",
        "hidden": True,
        "seed": 5,
        "torch": "2.13.0",
        "private_graders": True,
    }
    setup = bundle.read("setup.sh").decode()
    assert '"torch==2.13.0"' in setup and '"$here"/kvkata-0.1.0-py3-none-any.whl' in setup
    assert "@" not in setup.replace("$@", "") and "@" not in bundle.read("run_autograder").decode()
    for script in ("setup.sh", "run_autograder"):
        (tmp_path / script).write_bytes(bundle.read(script))
        checked = subprocess.run(["bash", "-n", str(tmp_path / script)], capture_output=True)
        assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["out.txt"], "the bundle is a zip"),
        (["out.zip", "--seed", "3"], "--seed chooses the hidden cases"),
        (["out.zip", "--fresh-seeds"], "--fresh-seeds chooses the hidden cases"),
        (["out.zip", "--hidden", "--fresh-seeds", "--seed", "3"], "choose one"),
        (["out.zip", "--graders", "."], "--graders adds hidden graders"),
        (["out.zip", "--track", "nope"], "--track: no track 'nope'"),
        (["out.zip", "--wheel", "missing.whl"], "is not a wheel file"),
    ],
)
def test_export_gradescope_usage_errors_are_one_line_and_exit_2(
    argv, message, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    done = runner.invoke(app, ["export", "gradescope", *argv])
    assert done.exit_code == 2, done.output
    assert message in done.output and len(done.output.strip().splitlines()) == 1, done.output
    assert list(tmp_path.iterdir()) == []


# --- the GitHub Actions workflow ------------------------------------------------------------------


def test_the_workflow_grades_on_push_with_the_public_cases_and_publishes_the_reports(tmp_path):
    done = runner.invoke(app, ["export", "github-action", str(tmp_path), "--track", "serving"])
    assert done.exit_code == 0, done.output
    text = (tmp_path / ".github/workflows/kata.yml").read_text()
    flow = yaml.safe_load(text)
    assert set(flow[True]) == {"push", "pull_request", "workflow_dispatch"}  # YAML 1.1: on
    assert flow["permissions"] == {"contents": "read"}
    steps = flow["jobs"]["grade"]["steps"]
    assert [s.get("uses", s.get("name")) for s in steps] == [
        "actions/checkout@v4",
        "actions/setup-python@v5",
        "Install the kata",
        "Grade paged_kv_cache.py",
        "Job summary",
        "actions/upload-artifact@v4",
    ]
    assert steps[3]["run"].startswith("kata grade paged_kv_cache.py --track serving")
    assert steps[4]["if"] == steps[5]["if"] == "always()"
    assert steps[5]["with"]["path"].split() == list(github_action.REPORTS)
    assert "--hidden" not in text and "--graders" not in text


@pytest.mark.slow
def test_the_workflows_steps_run_here_in_a_students_workspace(tmp_path):
    """The steps after the install, as the runner runs them (bash, in the repository's root):
    the untouched starter fails the grade step, and the summary and reports are still there."""
    workspace = tmp_path / "repo"
    assert runner.invoke(app, ["init", str(workspace)]).exit_code == 0
    assert runner.invoke(app, ["export", "github-action", str(workspace)]).exit_code == 0
    steps = yaml.safe_load((workspace / github_action.WORKFLOW).read_text())["jobs"]["grade"][
        "steps"
    ]
    summary = tmp_path / "step_summary.md"
    env = {
        **os.environ,
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    codes = {}
    for step in steps:
        if "run" in step and step["name"] != github_action.INSTALL_STEP:
            done = subprocess.run(
                ["bash", "-e", "-c", step["run"]],
                cwd=workspace,
                env=env,
                capture_output=True,
                text=True,
            )
            codes[step["name"]] = done.returncode
    assert codes == {"Grade kv_cache.py": 1, "Job summary": 0}
    assert all((workspace / name).is_file() for name in github_action.REPORTS)
    assert json.loads((workspace / "kata-report.json").read_text())["level"] == "below L4"
    assert "below L4" in summary.read_text()


# --- as Gradescope runs it ------------------------------------------------------------------------


def jail_argv() -> list[str]:
    """bubblewrap arguments for a root of this machine's read-only folders (/ itself stays a
    tmpfs, so /autograder can be made), its own /dev, PID namespace and /proc, as a container's,
    and /tmp writable."""
    argv = ["bwrap", "--unshare-pid", "--tmpfs", "/"]
    for entry in sorted(Path("/").iterdir()):
        if entry.name in ("proc", "dev", "tmp"):
            continue
        if entry.is_symlink():
            argv += ["--symlink", os.readlink(entry), str(entry)]
        elif entry.is_dir():
            argv += ["--ro-bind", str(entry), str(entry)]
    return argv + ["--dev", "/dev", "--proc", "/proc", "--bind", "/tmp", "/tmp"]


PRIVATE_GRADER = f"""from graders.shared.plans import Fail

ITEM = "{PRIVATE_ITEM}"


def grade(candidate):
    raise Fail("the course's own case fails everyone")
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A hidden bundle with one seed for the assignment and a private grader that fails every
    submission's PRIVATE_ITEM, made by the CLI from this checkout."""
    folder = tmp_path_factory.mktemp("bundle")
    (folder / "private").mkdir()
    (folder / "private" / "fails_everyone.py").write_text(PRIVATE_GRADER)
    out = folder / "kata.zip"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cli import main; main()",
            "export",
            "gradescope",
            str(out),
            "--hidden",
            "--seed",
            str(SEED),
            "--graders",
            str(folder / "private"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"seed {SEED}, private graders" in done.stdout
    return out


@pytest.fixture(scope="module")
def venv(bundle, tmp_path_factory):
    """setup.sh run once, into a fresh venv: its system steps skipped (Python and bubblewrap are
    here), torch from this machine's pip configuration. The system's Python (/usr/bin first on
    PATH, as in Gradescope's image) in a folder every user can read, as /opt/kvkata is: the
    process fallback's grade runs as an unprivileged user."""
    source = tmp_path_factory.mktemp("setup") / "source"
    zipfile.ZipFile(bundle).extractall(source)
    readable = Path(tempfile.mkdtemp(prefix="kvkata-test-venv-", dir="/tmp"))
    readable.chmod(0o755)
    folder = readable / "kvkata"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"/usr/local/bin:/usr/bin:/bin:{env['PATH']}"
    done = subprocess.run(
        ["bash", str(source / "setup.sh")],
        capture_output=True,
        text=True,
        env={**env, "KVKATA_VENV": str(folder), "KVKATA_TORCH_INDEX": ""},
    )
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "apt-get" not in done.stdout, "a system step ran though it was satisfied"
        assert "bubblewrap is there" in done.stdout
        yield folder
    finally:
        shutil.rmtree(readable)


@pytest.fixture
def autograde(bundle, venv, tmp_path):
    """run(files, bwrap=True): a fresh /autograder (the bundle unpacked in source/,
    run_autograder beside it, `files` {name: text} in submission/), run_autograder in bubblewrap
    with it bound at /autograder; returns (results.json or None, the folder, the process).
    bwrap=False masks bubblewrap inside, as a container that forbids its namespaces would."""

    def run(files: dict[str, str], bwrap: bool = True):
        root = tmp_path / "autograder"
        for folder in ("source", "submission", "results"):
            (root / folder).mkdir(parents=True)
        zipfile.ZipFile(bundle).extractall(root / "source")
        (root / "run_autograder").write_bytes((root / "source" / "run_autograder").read_bytes())
        for script in ("run_autograder", "source/setup.sh", "source/run_autograder"):
            (root / script).chmod(0o755)
        for name, text in files.items():
            (root / "submission" / name).write_text(text)
        masked = [] if bwrap else ["--ro-bind", "/dev/null", "/usr/bin/bwrap"]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        done = subprocess.run(
            [
                *jail_argv(),
                *masked,
                "--bind",
                str(root),
                "/autograder",
                sys.executable,
                "-c",
                AFTER_THE_RUN,
            ],
            capture_output=True,
            text=True,
            env={**env, "KVKATA_VENV": str(venv)},
            timeout=300,
        )
        results = root / "results" / "results.json"
        return (json.loads(results.read_text()) if results.is_file() else None), root, done

    return run


# The jail's first process: run_autograder, then what is left in the container once it is done
# (every process of the jail's own PID namespace but its init and this one), in LEFT; then a
# wait, for a process left behind to rewrite the results (the jail's end kills them all).
LEFT = "left-after-the-run.json"
AFTER_THE_RUN = f"""
import json, os, subprocess, sys, time
code = subprocess.call(["/autograder/run_autograder"])
left = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) in (1, os.getpid()):
        continue
    try:
        uid = int(open(f"/proc/{{pid}}/status").read().split("Uid:")[1].split()[0])
        argv = open(f"/proc/{{pid}}/cmdline", "rb").read().decode(errors="replace")
    except (OSError, IndexError):
        continue
    left.append({{"pid": int(pid), "uid": uid, "argv": argv.replace(chr(0), " ")[:200]}})
with open("/autograder/{LEFT}", "w") as f:
    json.dump(left, f)
time.sleep(1.5)
sys.exit(code)
"""


def by_visibility(results: dict, visibility: str) -> list[dict]:
    return [t for t in results["tests"] if t["visibility"] == visibility]


@pytest.mark.slow
def test_a_correct_submission_passes_all_but_the_private_case_shown_when_published(autograde):
    """The reference, in the process fallback (the judge root, the submission a user of its
    own, reading a copy of its files: its tests list their folder, as pytest does): every
    public item passes; the hidden grade passes every item but the one the bundled private
    grader fails, which shows its message there alone."""
    results, _, done = autograde(
        {
            "kv_cache.py": (ROOT / "solutions/kv_cache.py").read_text(),
            "test_kv_cache.py": (ROOT / "solutions/test_kv_cache.py").read_text(),
        },
        bwrap=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    check_gradescope_schema(results)
    private_points = rubric_data.load().item(PRIVATE_ITEM).points
    assert results["score"] == 100 - private_points, [
        (t["name"], t["output"]) for t in results["tests"] if t["status"] == "failed"
    ]
    public, hidden = by_visibility(results, "visible"), by_visibility(results, "after_published")
    assert len(public) == len(rubric_data.load().track(DENSE))  # L6+ included: it reached L6
    model = next(t for t in public if t["name"].split()[1] == f"{MODEL_ITEM}:")
    # The bundle's venv installs no transformers: real-model not attempted, its install line shown.
    assert model["status"] == "passed" or "pip install 'kvkata[real-model]'" in model["output"]
    assert {t["status"] for t in public if t is not model} == {"passed"}
    assert sum(t["max_score"] for t in public) == 0, "public feedback carries no points"
    assert len(hidden) == core_items() + 1  # the private case fails an L4 item: L6+ not started
    *items_hidden, summary = hidden
    assert [t["name"].split()[1] for t in items_hidden if t["status"] == "failed"] == [
        f"{PRIVATE_ITEM}:"
    ]
    assert summary["status"] == "failed" and "Level reached: L4" in summary["output"]
    assert sum(t["max_score"] for t in hidden) == 100
    assert "the course's own case fails everyone" in str(hidden)
    assert "the course's own case" not in str(public) + results["output"]
    assert f"Hidden cases (seed {SEED})" in results["output"]
    assert autograder.ISOLATION_LINES["process"] + autograder.UNPRIVILEGED in results["output"]
    assert f"hidden cases of seed {SEED}" in done.stdout, "the kata's report is in stdout"


@pytest.mark.slow
def test_the_untouched_starter_fails_every_item_as_not_attempted_in_bubblewrap(autograde):
    results, _, done = autograde({"kv_cache.py": (ROOT / "starter/kv_cache.py").read_text()})
    assert done.returncode == 0, done.stdout + done.stderr
    check_gradescope_schema(results)
    assert "Isolation: bubblewrap" in results["output"]
    assert results["score"] == 0
    assert {t["status"] for t in results["tests"][:-1]} == {"failed"}
    assert all(
        "still raises NotImplementedError" in t["output"] or "\n\nno test file: " in t["output"]
        for t in results["tests"][:-1]
    ), [t["output"][:80] for t in results["tests"]]


@pytest.mark.slow
def test_a_submission_forging_its_results_in_a_container_without_bubblewrap(autograde):
    """The process fallback, as in a container that forbids namespaces: the submission ran (its
    KVCache ended its process: the items say so) as an unprivileged user, who could not write
    into /autograder/results (no mark), and results.json is the grade's."""
    source = (HOSTILE / "forges_its_gradescope_results.py").read_text()
    results, root, done = autograde({"kv_cache.py": source}, bwrap=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (root / "results" / "forger-ran").exists(), "the submission wrote the results"
    time.sleep(1.0)  # a forger left running would have rewritten it by now
    results = json.loads((root / "results" / "results.json").read_text())
    check_gradescope_schema(results)
    assert results["score"] == 0 and results["output"] != "forged"
    assert "Isolation: process" in results["output"]
    assert autograder.UNPRIVILEGED in results["output"]
    assert {t["status"] for t in results["tests"][:-1]} == {"failed"}
    assert any("exited with code 0" in t["output"] for t in results["tests"])


# --- the attacks of a submission on its own grade (issue 40) ----------------------------------

AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="the process fallback runs the submission as a user of its own "
    "only where run_autograder is root, as in Gradescope's container: run the test as root",
)
IN_BOTH_MODES = [pytest.param(False, id="process", marks=AS_ROOT), pytest.param(True, id="bwrap")]


def left_after(root: Path) -> list[dict]:
    """The processes left in the container once run_autograder returned (AFTER_THE_RUN)."""
    return json.loads((root / LEFT).read_text())


def public_feedback(results: dict) -> str:
    """What the student sees at once: the visible tests' names and messages."""
    return "\n".join(f"{t['name']}: {t['output']}" for t in by_visibility(results, "visible"))


def graded_as_it_is(results: dict) -> None:
    """`results` is the grade of a file whose every function ends its process: the rubric's
    items, all failed, and the evidence that the file ran."""
    check_gradescope_schema(results)
    assert results["score"] == 0 and "forged" not in results["output"], results["output"]
    assert len(results["tests"]) == 2 * core_items() + 1, "not the grade's tests"
    assert {t["status"] for t in results["tests"]} == {"failed"}
    assert any("exited with code 0" in t["output"] for t in results["tests"]), "it never ran"


@pytest.mark.slow
@pytest.mark.parametrize("bwrap", IN_BOTH_MODES)
def test_a_submission_forging_the_grades_own_results_file_gets_its_true_grade(autograde, bwrap):
    """At import it writes a perfect results.json where the judge is to write its own and makes
    the folder read-only: run as one user with the judge, it was handed to Gradescope (score
    100). Now the judge's folder is not the submission's to write, or to see."""
    source = (HOSTILE / "forges_results_in_the_grades_folder.py").read_text()
    results, root, done = autograde({"kv_cache.py": source}, bwrap=bwrap)
    assert done.returncode == 0, done.stdout + done.stderr
    graded_as_it_is(results)
    assert left_after(root) == []


@pytest.mark.slow
@pytest.mark.parametrize("bwrap", IN_BOTH_MODES)
def test_a_daemon_rewriting_the_results_is_gone_before_any_report(autograde, bwrap):
    """A double-forked process in a session of its own rewrites every results.json it can find
    every 0.5 s: it is killed and reaped before the judge writes, nothing is left once
    run_autograder returns, and results.json, read 1.5 s later, is still the grade's."""
    token = f"kata-hostile-{uuid.uuid4().hex}"
    source = (HOSTILE / "rewrites_results_from_a_daemon.py").read_text().replace("@TOKEN@", token)
    results, root, done = autograde({"kv_cache.py": source}, bwrap=bwrap)
    assert done.returncode == 0, done.stdout + done.stderr
    assert left_after(root) == [], "a process outlived the grade"
    graded_as_it_is(results)


@pytest.mark.slow
@pytest.mark.parametrize("bwrap", IN_BOTH_MODES)
def test_a_submission_reading_the_seed_and_private_graders_finds_neither(autograde, bwrap):
    """It looks for the seed (command lines, the bundle's settings) and the private graders (the
    bundle, the judge's copy, `--graders`) and prints what it read into its public feedback."""
    source = (HOSTILE / "reads_the_private_graders.py").read_text()
    results, root, done = autograde({"kv_cache.py": source}, bwrap=bwrap)
    assert done.returncode == 0, done.stdout + done.stderr
    check_gradescope_schema(results)
    shown = public_feedback(results)
    assert "read: nothing;" in shown, shown[:2000]
    assert "the course's own case" not in shown and "fails_everyone" not in shown
    assert f'"seed": {SEED}' not in shown and "seed on a command line" not in shown
    refused = "PermissionError" if not bwrap else "FileNotFoundError"
    assert f"/autograder/source/assignment.json: {refused}" in shown, shown[:2000]
    assert left_after(root) == []


@pytest.mark.slow
def test_a_submission_rewriting_the_installed_kata_forges_nothing(autograde, venv):
    """As the container's root, this file gives itself full marks in the hidden grade (checked
    by hand before the fallback ran grades as an unprivileged user); now the venv is unchanged
    and the grade is 0."""
    (module,) = venv.glob("lib/python*/site-packages/graders/formats/gradescope.py")
    before = module.read_bytes()
    source = (HOSTILE / "rewrites_the_installed_kata.py").read_text()
    results, _, done = autograde({"kv_cache.py": source}, bwrap=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert module.read_bytes() == before, "the submission rewrote the kata"
    check_gradescope_schema(results)
    assert results["score"] == 0
    assert any("exited with code 0" in t["output"] for t in results["tests"]), "it never ran"


@pytest.mark.slow
def test_a_missing_file_is_a_graded_result_not_an_autograder_failure(autograde):
    results, _, done = autograde({"README.md": "I forgot the file"})
    assert done.returncode == 0, done.stdout + done.stderr
    check_gradescope_schema(results)
    assert results["score"] == 0 and results["output"].startswith("No kv_cache.py was submitted")
    assert len(results["tests"]) == core_items()
    assert {t["visibility"] for t in results["tests"]} == {"visible"}


@pytest.mark.slow
def test_a_file_that_does_not_import_is_a_graded_failure_with_its_error(autograde):
    results, _, done = autograde({"kv_cache.py": (HOSTILE / "syntax_error.py").read_text()})
    assert done.returncode == 0, done.stdout + done.stderr
    check_gradescope_schema(results)
    assert results["score"] == 0
    assert {t["status"] for t in results["tests"][:-1]} == {"failed"}
    assert all("SyntaxError" in t["output"] for t in results["tests"][:-1]), [
        t["output"][:80] for t in results["tests"]
    ]


@pytest.mark.slow
def test_a_grade_past_its_time_is_stopped_with_its_processes_and_not_graded(tmp_path, monkeypatch):
    """GRADE_SECONDS is the backstop: the grade's whole session is killed, and the submission
    is told so (a graded result, not an autograder failure)."""
    monkeypatch.setattr(autograder, "GRADE_SECONDS", 0.5)
    implementation = tmp_path / "kv_cache.py"
    implementation.write_text((ROOT / "solutions/kv_cache.py").read_text())
    before = set(os.listdir("/proc"))
    with pytest.raises(autograder.NotGraded, match=r"did not finish within 0\.5 s"):
        autograder.grade(implementation, None, ASSIGNMENT, tmp_path, "bwrap", hidden=False)
    time.sleep(0.5)
    left = [
        pid
        for pid in set(os.listdir("/proc")) - before
        if pid.isdigit() and "kvkata-submission" in working_folder(pid)
    ]
    assert left == [], "a process of the stopped grade is still running"


def working_folder(pid: str) -> str:
    """The working folder of process `pid`, or "" when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""
