"""Batch grading: a folder of submissions graded in parallel, each isolated, summarised as CSV and
Markdown. One batch of five (correct, toy, hangs at import, exits at import, untouched starter,
one of them nested) is graded once and shared by the tests marked slow.

The folder is the candidates' (tests/hostile/submissions_tree.py): nothing that resolves outside
it is graded, each thing skipped is named with its reason, and every name and message reaches
the CSV, the Markdown and the terminal as data (no formula, link, HTML or escape of theirs).
"""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from graders.judge.result import GradeResult, ItemResult, TellResult
from graders.judge.request import GradeRequest
from graders.shared import transformers_extra
from graders.shared.rubric import load
from graders.shared.tracks import DENSE, SERVING
from graders.workflows import batch
from tests.grading import stand_in
from graders.workflows.batch import (
    Outcome,
    Skipped,
    Submission,
    find_submissions,
    grade_all,
    survey,
    terminal_table,
    write_summary,
)

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
FAST = 2.0  # seconds an import may take: carol's never ends, the others' take far less
NAMES = ["alice", "bob", "carol", "dave", "team/erin"]
SECRET = "kata-secret-7e3a19"
_spec = importlib.util.spec_from_file_location(
    "submissions_tree", ROOT / "tests" / "hostile" / "submissions_tree.py"
)
TREE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(TREE)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


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
    outcomes = grade_all(
        find_submissions(root), 2, GradeRequest(root, import_timeout=FAST), on_done=done.append
    )
    elapsed = time.monotonic() - start
    write_summary(outcomes, root / "summary.csv", root / "summary.md")
    return {
        "outcomes": outcomes,
        "done": done,
        "elapsed": elapsed,
        "csv": root / "summary.csv",
        "md": root / "summary.md",
    }


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
    # the reference implements section 8: L6+, where transformers lets real-model run
    assert graded["alice"].level == ("L6+" if transformers_extra.problem() is None else "L6")
    assert graded["alice"].passed
    assert graded["bob"].level == "L5"
    assert [t.id for t in graded["bob"].tells if t.detected] == ["concat-every-step"]
    for name, status in (("carol", "timeout"), ("dave", "error")):  # L6+ not started after it
        assert {i.status for i in graded[name].items if i.level != "L6+"} == {status}
        assert {i.status for i in graded[name].items if i.level == "L6+"} == {"not_attempted"}
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
    assert [row.split(" | ")[0].removeprefix("| ") for row in rows] == [f"`{n}`" for n in NAMES]
    assert "TIMEOUT" in rows[2] and "TODO" in rows[4] and "concat-every-step" in rows[1]


def test_a_grade_that_raises_is_an_error_outcome_and_the_others_go_on(monkeypatch, tmp_path):
    graded = object()

    def fake_grade(request, on_item):
        if "broken" in str(request.implementation):
            raise RuntimeError("the machine is on fire")
        return graded

    stand_in(monkeypatch, fake_grade)
    subs = [Submission(n, tmp_path / n / "kv_cache.py", None) for n in ("a", "broken", "c")]
    outcomes = grade_all(subs, 2, GradeRequest(tmp_path))
    assert [o.result for o in outcomes] == [graded, None, graded]
    assert "RuntimeError: the machine is on fire" in outcomes[1].error

    write_summary(outcomes[1:2], tmp_path / "s.csv", tmp_path / "s.md")
    with (tmp_path / "s.csv").open(newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["level"] == "" and "the machine is on fire" in row["error"]
    assert "`RuntimeError: the machine is on fire` |" in (tmp_path / "s.md").read_text()


def test_every_grade_gets_the_batchs_options(monkeypatch, tmp_path):
    from graders.judge.isolation import Sandbox

    seen = []
    stand_in(monkeypatch, lambda request, on_item: seen.append(request))
    subs = [
        Submission(n, tmp_path / n / "kv_cache.py", tmp_path / n / "test_kv_cache.py")
        for n in ("a", "b")
    ]
    sandbox = Sandbox(mode="process", memory=1 << 30)
    settings = GradeRequest(
        tmp_path, hidden=True, timeout=3.0, import_timeout=9.0, sandbox=sandbox, seed=8
    )
    grade_all(subs, 2, settings)
    assert sorted(seen, key=lambda r: r.implementation) == [
        replace(settings, implementation=s.implementation, tests=s.tests) for s in subs
    ]
    seen.clear()
    grade_all(subs, 1, GradeRequest(tmp_path, track=SERVING, hidden=True))
    assert [r.track for r in seen] == [SERVING, SERVING]
    assert len({r.seed for r in seen}) == 1 and seen[0].seed is not None, "one seed drawn"


def test_an_unavailable_sandbox_stops_the_batch_instead_of_failing_each_submission(
    monkeypatch, tmp_path
):
    from graders.judge.isolation import SandboxUnavailable

    def no_sandbox(request, on_item):
        raise SandboxUnavailable("bubblewrap cannot run here")

    stand_in(monkeypatch, no_sandbox)
    subs = [Submission(n, tmp_path / n / "kv_cache.py", None) for n in ("a", "b", "c")]
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        grade_all(subs, 1, GradeRequest(tmp_path))


# --- a folder an attacker prepared -----------------------------------------------------------


@pytest.fixture
def tree(tmp_path) -> dict:
    """tests/hostile/submissions_tree.py built in tmp_path/subs, its secrets in tmp_path/outside."""
    graded = TREE.build(
        tmp_path / "subs",
        tmp_path / "outside",
        (ROOT / "starter" / "kv_cache.py").read_text(),
        SECRET,
    )
    return {"root": tmp_path / "subs", "outside": tmp_path / "outside", "graded": graded}


def _surveyed(root: Path) -> tuple[list[Submission], list[Skipped]]:
    """survey(root), failing the test if it blocks (it opened the FIFO)."""
    found = []
    looking = threading.Thread(target=lambda: found.append(survey(root)), daemon=True)
    looking.start()
    looking.join(timeout=20)
    assert found, "survey blocked: it opened a FIFO"
    return found[0]


def test_survey_grades_nothing_that_resolves_outside_and_says_why_for_each(tree):
    submissions, skipped = _surveyed(tree["root"])
    assert [s.name for s in submissions] == tree["graded"]
    assert {s.name: s.reason.rsplit(" the folder", 1)[0] for s in skipped} == {
        name: reason.rsplit(" the folder", 1)[0] for name, reason in TREE.SKIPPED.items()
    }
    for submission in submissions:
        real = Path(os.path.realpath(submission.implementation))
        assert real.is_relative_to(os.path.realpath(tree["root"])) and real.is_file()
        assert submission.tests is None


def test_a_link_that_stays_inside_the_folder_is_graded(tree):
    submissions, _ = _surveyed(tree["root"])
    alias = next(s for s in submissions if s.name == TREE.INSIDE_LINK)
    assert alias.implementation.is_symlink()
    assert alias.implementation.resolve() == (tree["root"] / "plain" / "kv_cache.py").resolve()


def test_a_name_that_is_not_utf8_is_a_submission_like_any_other(tree):
    submissions, _ = _surveyed(tree["root"])
    (odd,) = [s for s in submissions if "not-utf8" in s.name]
    assert os.fsencode(odd.implementation).endswith(TREE.UNDECODABLE + b"/kv_cache.py")
    assert batch.file_name(odd.name) == "not-utf8-\\xff\\xfe"


def _result(statuses: dict[str, str], *, similarity=None, messages=None) -> GradeResult:
    levels = {item.id: item.level for item in load().items}
    items = [
        ItemResult(
            i, levels[i], status, 1.0 if status == "pass" else 0.0, 1.0, (messages or {}).get(i, "")
        )
        for i, status in statuses.items()
    ]
    return GradeResult(
        "kv_cache.py",
        "L4",
        items,
        [TellResult("caches-q", True, "")],
        True,
        similarity=similarity,
        seed=5,
    )


def _hostile_outcomes() -> tuple[list[Outcome], list[Skipped]]:
    """An outcome per hostile name, one of them an error quoting HTML and a formula, and one
    skipped folder: what write_summary and terminal_table get from a batch of the tree."""
    statuses = {item.id: "pass" for item in load().track(DENSE)}
    statuses.update({"own-tests": "not_attempted", "gqa": "fail", "prealloc": "timeout"})
    result = _result(
        statuses,
        messages={"own-tests": "no test file: write test_kv_cache.py"},
        similarity=[
            {"solution": "solutions/concat_kv_cache.py", "fraction": 0.31},
            {"solution": "solutions/kv_cache.py", "fraction": 0.97},
        ],
    )
    names = [*TREE.NAMES, "not-utf8-\udcff\udcfe"]
    outcomes = [
        Outcome(Submission(n, Path(n, "kv_cache.py"), None), result, seconds=3.2) for n in names
    ]
    outcomes.append(
        Outcome(
            Submission("broken", Path("broken"), None),
            error="grading raised: Traceback\n=cmd|' /C calc'!A0 <img src=x "
            "onerror=alert(1)> \x1b]0;owned\x07",
        )
    )
    return outcomes, [
        Skipped("links-a-secret", "kv_cache.py is a link to a file outside the folder graded")
    ]


def test_no_cell_of_the_csv_starts_a_formula_and_the_csv_parses(tmp_path):
    outcomes, skipped = _hostile_outcomes()
    write_summary(outcomes, tmp_path / "s.csv", tmp_path / "s.md", skipped=skipped)
    with (tmp_path / "s.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert len(rows) == 1 + len(outcomes) + len(skipped)
    assert all(len(row) == len(rows[0]) for row in rows)
    cells = [cell for row in rows for cell in row]
    assert not [cell for cell in cells if cell.startswith(FORMULA_START)]
    assert not [cell for cell in cells if re.search("[\x00-\x08\x0b-\x1f\x7f]", cell)]
    names = {row[0] for row in rows[1:]}
    assert '\'=HYPERLINK("https:evil.example","click me")' in names
    assert "not-utf8-\\xff\\xfe" in names and "links-a-secret" in names


def test_the_markdown_shows_every_name_and_message_as_code_never_markup(tmp_path):
    outcomes, skipped = _hostile_outcomes()
    write_summary(outcomes, tmp_path / "s.csv", tmp_path / "s.md", skipped=skipped)
    text = (tmp_path / "s.md").read_text(encoding="utf-8")
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    table = text.splitlines()[2:]  # the seed's line, then the table
    width = table[0].count(" | ")
    for line in table[2:]:
        assert line.replace("\\|", "").count(" | ") == width, f"a cell of its own: {line}"
        submission = line.removeprefix("| ").split(" | ")[0]
        assert submission.startswith("`") and submission.endswith("`"), line
    assert "<img" not in text.replace("`<img src=x onerror=alert(1)>`", "").replace(
        "`=cmd\\|' /C calc'!A0 <img src=x onerror=alert(1)> \\x1b]0;owned\\x07`", ""
    )
    assert "[link](https:evil.example)" not in text.replace(
        "`[link](https:evil.example)\\|x\\| cell`", ""
    )


def test_the_summaries_carry_the_similarity_and_why_own_tests_was_not_attempted(tmp_path):
    outcomes, _ = _hostile_outcomes()
    write_summary(outcomes[:1], tmp_path / "s.csv", tmp_path / "s.md")
    with (tmp_path / "s.csv").open(newline="") as f:
        (row,) = csv.DictReader(f)
    assert row["similarity"] == "0.97 kv_cache.py"
    assert row["own-tests"] == "not_attempted: no test file"
    assert row["gqa"] == "fail" and row["seed"] == "5" and row["tells"] == "caches-q"
    md = (tmp_path / "s.md").read_text()
    assert "TODO `no test file`" in md and "| 0.97 kv_cache.py |" in md


def test_the_terminal_table_fits_80_columns_and_shows_names_printable():
    outcomes, skipped = _hostile_outcomes()
    lines = terminal_table(outcomes, skipped)
    assert lines[0].split() == [
        "submission",
        "level",
        "score",
        "not",
        "passing",
        "similarity",
        "time",
    ]
    assert len(lines) == 1 + len(outcomes) + len(skipped)
    assert max(len(line) for line in lines) <= batch.WIDTH
    assert not [line for line in lines if re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", line)]
    row = next(line for line in lines if line.startswith("@SUM"))
    assert "L4" in row and "own-tests, gqa +1" in row and "0.97 kv_cache.py" in row and "3s" in row
    assert any(
        line.startswith("links-a-secret") and "not graded: kv_cache.py is a link" in line
        for line in lines
    )
    assert any(line.startswith("not-utf8-\\xff") for line in lines)


def test_wide_characters_in_a_name_count_two_columns():
    from rich.cells import cell_len

    result = _result({"attend-shape": "pass"})
    names = ["候选人的提交文件夹名字", "😀" * 12, "mixed名字😀x"]
    lines = terminal_table([Outcome(Submission(n, Path(n), None), result) for n in names])
    assert max(cell_len(line) for line in lines) <= batch.WIDTH
    assert len({cell_len(line.split("L4")[0]) for line in lines[1:]}) == 1, "levels aligned"


def test_a_list_of_ids_too_long_for_its_column_says_how_many_more():
    ids = ["prefix-equivalence", "validate-shapes", "stable-softmax", "prealloc"]
    assert batch._listed(ids, 21) == "prefix-equivalence +3"
    assert batch._listed(ids, 20) == "4 items"
    assert batch._listed(ids[3:], 20) == "prealloc"
