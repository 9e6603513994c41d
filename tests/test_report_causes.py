"""Issue 44 on real grades beyond tests/wrong (whose reports test_wrong_implementations.py checks):
every bundled mistake of own-tests graded as a candidate leads with the cause it put in; a hang is
one cause with one hint; the untouched starter and a file whose items fail for many different
reasons stay within a screen; the JSON names every item's cause. Graded once, for the module."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.report_length import REPORT_LINES_ONE_BUG, report_lines, many_reasons
from graders.dense.mistakes import MISTAKES
from graders.formats.causes import cause_of, causes, likely
from graders.formats.gradescope import to_gradescope
from graders.formats.report import SCREEN_LINES, to_json
from graders.judge.result import GradeResult
from tests.grading import grade
from graders.shared.mutation import REFERENCE

pytestmark = pytest.mark.slow  # whole grades

ROOT = Path(__file__).resolve().parent.parent
HANG = ROOT / "tests" / "hostile" / "hangs_in_attend.py"
BOOTSTRAP = """import sys as _sys, types as _types
_sys.modules["kv_cache_base"] = _base_module = _types.ModuleType("kv_cache_base")
exec(compile({source!r}, "kv_cache_base.py", "exec"), _base_module.__dict__)
"""
# The cause each bundled mistake puts in, and where its likely mistake points (None: no guess).
MISTAKE_CAUSES = {
    "no-scale": ("prefix-equivalence", "the scores' scale"),
    "scale-by-head-dim": ("prefix-equivalence", "the scores' scale"),
    "softmax-wrong-axis": ("prefix-equivalence", "the softmax's axis"),
    "values-are-keys": ("prefix-equivalence", None),
    "attends-over-capacity": ("prefix-equivalence", None),
    "drops-newest": ("prefix-equivalence", None),
    "causal-mask-on-newest": ("prefix-equivalence", "the mask of attention"),
    "overwrites-first-slot": ("append-time-dim", "what append keeps of the cache"),
    "appends-on-heads": ("append-time-dim", "which dimension append grows"),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, GradeResult]:
    folder = tmp_path_factory.mktemp("causes")
    files = {}
    for mistake in MISTAKES:
        files[mistake.name] = folder / mistake.name / "kv_cache.py"
        files[mistake.name].parent.mkdir()
        files[mistake.name].write_text(mistake.source())
    files["hang"] = folder / "hang" / "kv_cache.py"
    files["hang"].parent.mkdir()
    files["hang"].write_text(BOOTSTRAP.format(source=REFERENCE.read_text()) + HANG.read_text())
    files["many-reasons"] = folder / "many-reasons" / "kv_cache.py"
    files["many-reasons"].parent.mkdir()
    files["many-reasons"].write_text(many_reasons().source())
    files["starter"] = ROOT / "starter" / "kv_cache.py"

    def run(name: str) -> tuple[str, GradeResult]:
        return name, grade(files[name], timeout=2.0 if name == "hang" else 10.0)

    with ThreadPoolExecutor(3) as pool:
        return dict(pool.map(run, files))


@pytest.mark.parametrize("name", list(MISTAKE_CAUSES))
def test_a_bundled_mistake_leads_with_its_cause_in_one_screen(graded, name):
    result = graded[name]
    lead, points_at = MISTAKE_CAUSES[name]
    found = [c for c in causes(result) if c.lead.status != "not_attempted"]
    assert [c.lead.id for c in found] == [lead], [(c.lead.id, c.members) for c in found]
    assert (points_at is None) or points_at in (likely(found[0].lead.message) or "")
    lines = report_lines(result)
    assert len(lines) <= REPORT_LINES_ONE_BUG, "\n".join(lines)
    assert sum("hint:" in line for line in lines) == 1, "the lead's hint alone"


def test_a_hang_is_one_cause_with_one_hint(graded):
    result = graded["hang"]
    timeouts = [i.id for i in result.items if i.status == "timeout"]
    assert len(timeouts) > 3, "it hangs in every item that attends"
    hung = [c for c in causes(result) if c.lead.status == "timeout"]
    assert len(hung) == 1 and {i.id for i in hung[0].items} >= set(timeouts) - {"own-tests"}
    lines = report_lines(result)
    assert len(lines) <= REPORT_LINES_ONE_BUG, "\n".join(lines)
    assert sum("TIMEOUT" in line for line in lines) == 1
    assert "hint:" not in " ".join(lines), "a hang's item hint is not about the hang"


@pytest.mark.parametrize("name", ["starter", "many-reasons"])
def test_the_starter_and_many_reasons_stay_within_a_screen(graded, name):
    result = graded[name]
    lines = report_lines(result)
    assert len(lines) <= SCREEN_LINES, "\n".join(lines)
    every = {i.id for i in result.reported if i.status != "pass"}  # L6+ not started aside
    assert {i.id for c in causes(result) for i in c.items} == every, "none left out"
    if name == "many-reasons":
        assert len(causes(result)) >= 8, "many causes, each its own"


def test_the_json_and_gradescope_name_each_items_cause(graded):
    result = graded["no-scale"]
    report = json.loads(json.dumps(to_json(result)))
    lead_of = cause_of(result)
    assert {i["id"]: i["cause"] for i in report["items"]} == {
        i.id: lead_of.get(i.id) for i in result.items
    }
    assert {i["id"]: i["message"] for i in report["items"]} == {
        i.id: i.message for i in result.items
    }, "every item's message, whole"
    tests = {t["name"].split()[1].rstrip(":"): t for t in to_gradescope(result)["tests"]}
    assert tests["gqa"]["output"].startswith("Cause: prefix-equivalence fails")
    assert "Likely mistake" not in tests["gqa"]["output"] and "Hint:" not in tests["gqa"]["output"]
