"""Batch grading: a folder of submissions graded in parallel, each isolated, summarised as CSV and
Markdown. One batch of five (correct, toy, hangs at import, exits at import, untouched starter,
one of them nested) is graded once and shared by the tests marked slow.
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

import pytest

from graders.tracks import SERVING
from graders.workflows import batch
from graders.workflows.batch import Submission, find_submissions, grade_all, write_summary

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
FAST = 2.0  # seconds an import may take: carol's never ends, the others' take far less
NAMES = ["alice", "bob", "carol", "dave", "team/erin"]


def _submit(root: Path, name: str, implementation: Path | str, tests: Path | None = None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    if isinstance(implementation, Path):
        shutil.copy(implementation, folder / "kv_cache.py")
    else:
        (folder / "kv_cache.py").write_text(implementation)
    if tests:
        shutil.copy(tests, folder / "test_kv_cache.py")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A folder of the five submissions, and a folder that is not one."""
    root = tmp_path_factory.mktemp("submissions")
    _submit(root, "alice", SOLUTIONS / "kv_cache.py", SOLUTIONS / "test_kv_cache.py")
    # own-tests is an L5 item: without tests the toy would stop at L4, before its tell could cap it
    _submit(root, "bob", SOLUTIONS / "concat_kv_cache.py", SOLUTIONS / "test_kv_cache.py")
    _submit(root, "carol", "while True:\n    pass\n")
    _submit(root, "dave", "import os\nos._exit(3)\n")
    _submit(root, "team/erin", ROOT / "starter" / "kv_cache.py")
    (root / "notes").mkdir()  # no kv_cache.py: not a submission
    return root


@pytest.fixture(scope="module")
def run(root):
    done = []
    start = time.monotonic()
    # Calls keep the default timeout: under load bob's measured appends (concat, counted by the
    # allocation probe) once took more than 2 s, and his tell went unseen.
    outcomes = grade_all(find_submissions(root), jobs=2, import_timeout=FAST, on_done=done.append)
    elapsed = time.monotonic() - start
    write_summary(outcomes, root / "summary.csv", root / "summary.md")
    return {"outcomes": outcomes, "done": done, "elapsed": elapsed, "csv": root / "summary.csv",
            "md": root / "summary.md"}


def results(run) -> dict:
    return {o.submission.name: o.result for o in run["outcomes"]}


def test_every_folder_with_a_kv_cache_py_is_a_submission_nested_ones_too(root):
    subs = find_submissions(root)
    assert [s.name for s in subs] == NAMES
    assert subs[0].tests == subs[0].implementation.with_name("test_kv_cache.py")
    assert subs[2].tests is None


def test_the_serving_track_s_submissions_are_the_folders_with_a_paged_kv_cache_py(tmp_path):
    for name in ("dense-only", "paged", "team/paged"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "test_kv_cache.py").write_text("")
    (tmp_path / "dense-only" / "kv_cache.py").write_text("")
    for name in ("paged", "team/paged"):
        (tmp_path / name / "paged_kv_cache.py").write_text("")
    subs = find_submissions(tmp_path, SERVING)
    assert [s.name for s in subs] == ["paged", "team/paged"]
    assert all(s.implementation.name == "paged_kv_cache.py" and s.tests is None for s in subs)


@pytest.mark.slow
def test_every_outcome_comes_back_in_order_in_bounded_time(run):
    assert [o.submission.name for o in run["outcomes"]] == NAMES
    assert all(o.error is None and o.result is not None for o in run["outcomes"])
    assert sorted(o.submission.name for o in run["done"]) == NAMES
    assert run["elapsed"] < 60, f"grading five submissions took {run['elapsed']:.1f} s"


@pytest.mark.slow
def test_each_submission_gets_its_own_grade(run):
    graded = results(run)
    assert graded["alice"].level == "L6" and graded["alice"].passed
    assert graded["bob"].level == "L5"
    assert [t.id for t in graded["bob"].tells if t.detected] == ["concat-every-step"]
    assert {i.status for i in graded["carol"].items} == {"timeout"}
    assert {i.status for i in graded["dave"].items} == {"error"}
    assert {i.status for i in graded["team/erin"].items} == {"not_attempted"}


@pytest.mark.slow
def test_the_csv_has_a_row_per_submission_with_its_level_statuses_and_tells(run):
    with run["csv"].open(newline="") as f:
        rows = {row["submission"]: row for row in csv.DictReader(f)}
    assert list(rows) == NAMES
    assert {n: r["level"] for n, r in rows.items()} == {n: g.level for n, g in results(run).items()}
    assert rows["alice"]["score"] == rows["alice"]["max_score"] == "100"
    assert rows["bob"]["tells"] == "concat-every-step" and rows["bob"]["prealloc"] == "fail"
    assert rows["carol"]["prefix-equivalence"] == "timeout"
    assert all(r["error"] == "" for r in rows.values())


@pytest.mark.slow
def test_the_markdown_has_a_row_per_submission(run):
    lines = run["md"].read_text().splitlines()
    rows = [line for line in lines[2:] if line.startswith("| ")]
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == NAMES
    assert "TIMEOUT" in rows[2] and "TODO" in rows[4] and "concat-every-step" in rows[1]


def test_a_grade_that_raises_is_an_error_outcome_and_the_others_go_on(monkeypatch, tmp_path):
    graded = object()

    def fake_grade(implementation, tests, **kwargs):
        if "broken" in str(implementation):
            raise RuntimeError("the machine is on fire")
        return graded

    monkeypatch.setattr(batch, "grade", fake_grade)
    subs = [Submission(n, tmp_path / n / "kv_cache.py", None) for n in ("a", "broken", "c")]
    outcomes = grade_all(subs, jobs=2)
    assert [o.result for o in outcomes] == [graded, None, graded]
    assert "RuntimeError: the machine is on fire" in outcomes[1].error

    write_summary(outcomes[1:2], tmp_path / "s.csv", tmp_path / "s.md")
    with (tmp_path / "s.csv").open(newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["level"] == "" and "the machine is on fire" in row["error"]
    assert "RuntimeError: the machine is on fire |" in (tmp_path / "s.md").read_text()


def test_every_grade_gets_the_batchs_options(monkeypatch, tmp_path):
    from graders.isolation import Sandbox

    seen = []
    monkeypatch.setattr(batch, "grade", lambda implementation, tests, **kwargs: seen.append(kwargs))
    subs = [Submission(n, tmp_path / n / "kv_cache.py", None) for n in ("a", "b")]
    sandbox = Sandbox(mode="process", memory=1 << 30)
    grade_all(subs, jobs=2, hidden=True, timeout=3.0, import_timeout=9.0, sandbox=sandbox, seed=8)
    assert seen == [{"track": "dense", "hidden": True, "timeout": 3.0, "import_timeout": 9.0,
                     "sandbox": sandbox, "seed": 8}] * 2
    seen.clear()
    grade_all(subs, jobs=1, track=SERVING)
    assert [kwargs["track"] for kwargs in seen] == ["serving", "serving"]


def test_an_unavailable_sandbox_stops_the_batch_instead_of_failing_each_submission(
        monkeypatch, tmp_path):
    from graders.isolation import SandboxUnavailable

    def no_sandbox(implementation, tests, **kwargs):
        raise SandboxUnavailable("bubblewrap cannot run here")

    monkeypatch.setattr(batch, "grade", no_sandbox)
    subs = [Submission(n, tmp_path / n / "kv_cache.py", None) for n in ("a", "b", "c")]
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        grade_all(subs, jobs=1)
