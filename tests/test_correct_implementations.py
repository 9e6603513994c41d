"""Correct code is never failed: the solutions and correct designs in other styles pass
every item, public and hidden, and reach L6 (the concat baseline fails only `prealloc`); the
paged solutions pass the whole serving track."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graders.judge.grade import kata_graders
from graders.judge.result import GradeResult
from graders.shared import transformers_extra
from tests.grading import grade
from graders.shared.mutation import REFERENCE
from graders.shared.rubric import load
from graders.shared.tracks import DENSE, SERVING
from tests.seeds import SEEDS

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

ROOT = Path(__file__).resolve().parent.parent
MODEL_TESTS = ROOT / "solutions" / "test_kv_cache.py"
IMPLEMENTATIONS = ROOT / "tests" / "implementations"
CORRECT = [
    ROOT / "solutions" / "kv_cache.py",
    *sorted(p for p in IMPLEMENTATIONS.glob("*.py") if not p.name.startswith("paged_")),
]
BASELINE = ROOT / "solutions" / "concat_kv_cache.py"
SECTION_8 = {ROOT / "solutions" / "kv_cache.py", IMPLEMENTATIONS / "window_slice.py"}  # L6+
CORRECT_PAGED = [
    ROOT / "solutions" / "paged_kv_cache.py",
    *sorted(IMPLEMENTATIONS.glob("paged_*.py")),
]


@pytest.fixture(scope="module")
def graded() -> dict[Path, GradeResult]:
    with ThreadPoolExecutor(2) as pool:
        results = pool.map(lambda p: grade(p, MODEL_TESTS, hidden=True), [*CORRECT, BASELINE])
        return dict(zip([*CORRECT, BASELINE], results))


def _not_passed(result: GradeResult) -> str:
    return "\n".join(
        f"  {i.id}: {i.status}: {i.message}" for i in result.items if i.status != "pass"
    )


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_correct_designs_pass_everything_and_reach_l6(path, graded):
    """The designs of contract section 8 (a ring buffer, a sliced buffer) reach L6+; those
    written before it reach L6 as they did, their L6+ items not attempted."""
    result = graded[path]
    assert result.passed, f"{path.name} was failed:\n{_not_passed(result)}"
    assert result.score == result.max_score == 100
    plus = {i.status for i in result.items if i.level == "L6+"}
    if path in SECTION_8 and transformers_extra.problem() is None:
        assert result.level == "L6+" and plus == {"pass"}
        assert result.plus_score == result.plus_max_score == 40  # four items of 10 points
    elif path in SECTION_8:  # real-model not attempted without transformers: L6+ out of reach
        assert result.level == "L6" and plus == {"pass", "not_attempted"}
        assert result.plus_score == 30
    else:
        assert result.level == "L6" and plus == {"not_attempted"} and not result.plus_started
    assert not [t.id for t in result.tells if t.detected]
    assert result.exit_code() == 0


def test_the_concat_baseline_fails_only_prealloc_and_shows_concat_every_step(graded):
    result = graded[BASELINE]
    assert {i.id for i in result.reported if i.status != "pass"} == {"prealloc"}, _not_passed(
        result
    )
    assert not result.plus_started  # it has no section 8, and does not reach L6 anyway
    assert [t.id for t in result.tells if t.detected] == ["concat-every-step"]
    assert result.level == "L5"


@pytest.mark.parametrize("path", CORRECT_PAGED, ids=[p.stem for p in CORRECT_PAGED])
def test_correct_paged_caches_pass_the_serving_track(path):
    result = grade(path, track="serving", hidden=True)
    assert result.passed, f"{path.name} was failed:\n{_not_passed(result)}"
    assert result.level == "serving" and result.score == result.max_score == 100
    assert result.exit_code() == 0


OTHER_STYLES = [p for p in [*CORRECT, *CORRECT_PAGED] if p.parent == IMPLEMENTATIONS]


@pytest.fixture(scope="module")
def graded_at_seeds() -> dict[tuple[Path, int], GradeResult]:
    """The correct designs in other styles, hidden cases only, at two more seeds each (the
    solutions meet every seed of SEEDS in tests/test_hidden.py)."""
    jobs = [(path, seed) for path in OTHER_STYLES for seed in SEEDS[:2]]

    def run(job: tuple[Path, int]) -> GradeResult:
        path, seed = job
        track = SERVING if path.name.startswith("paged_") else DENSE
        items = {g.item for g in kata_graders(hidden=True)} & {i.id for i in load().track(track)}
        return grade(path, track=track.id, hidden=True, only=items, seed=seed)

    with ThreadPoolExecutor(2) as pool:
        return dict(zip(jobs, pool.map(run, jobs)))


@pytest.mark.parametrize("seed", SEEDS[:2])
@pytest.mark.parametrize("path", OTHER_STYLES, ids=[p.stem for p in OTHER_STYLES])
def test_correct_designs_pass_the_hidden_cases_of_other_seeds(path, seed, graded_at_seeds):
    result = graded_at_seeds[path, seed]
    assert result.seed == seed and result.passed, f"{path.name} was failed:\n{_not_passed(result)}"


def test_the_serving_starter_is_not_attempted():
    result = grade(ROOT / "starter" / "paged_kv_cache.py", track="serving")
    assert {i.status for i in result.items} == {"not_attempted"}, result.items
    assert result.level == "none"


def test_code_under_torch_compile_is_graded_as_it_runs_eagerly(tmp_path):
    """torch.compile is off in the worker: every call runs in a freshly forked child, where a
    compiled function would compile again and a correct file would time out (module_bthd.py
    compiles its attention, as gpt-fast does). This attend answers zeros only when traced."""
    path = tmp_path / "kv_cache.py"
    path.write_text(
        REFERENCE.read_text()
        + (
            "\n\n_eager_attend = attend\n\n\n"
            "@torch.compile(backend='eager')\n"
            "def attend(cache, query):\n"
            "    if torch.compiler.is_compiling():  # true only while torch.compile traces\n"
            "        return torch.zeros_like(query)\n"
            "    return _eager_attend(cache, query)\n"
        )
    )
    (item,) = grade(path, only={"prefix-equivalence"}).items
    assert item.status == "pass", item.message
