"""Every wrong implementation fails exactly its intended items and shows exactly its tells.

The implementations selected for this run are graded up front, a few at a time (each grade is
mostly waiting on its own worker processes), and each test then checks one of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from graders.grade import GradeResult, grade
from tests.wrong import Wrong, everything

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

WRONG = everything()
PARALLEL = 3


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory) -> dict[str, GradeResult]:
    selected = [item.callspec.params["wrong"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")]
    folder = tmp_path_factory.mktemp("wrong")

    def run(wrong: Wrong) -> tuple[str, GradeResult]:
        (folder / wrong.name).mkdir()
        return wrong.name, grade(wrong.write(folder / wrong.name), track=wrong.track.id)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(pool.map(run, selected))


def test_names_are_unique():
    names = [w.name for w in WRONG]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("wrong", WRONG, ids=[w.name for w in WRONG])
def test_fails_exactly_its_items(wrong, graded):
    result = graded[wrong.name]
    failed = {i.id for i in result.items if i.status != "pass" and i.id != "own-tests"}
    detected = {t.id for t in result.tells if t.detected}
    messages = "\n".join(f"  {i.id}: {i.status}: {i.message}" for i in result.items)
    assert not result.grader_broke, f"the grader broke:\n{messages}"
    assert failed == set(wrong.fails), (
        f"{wrong.name} failed {sorted(failed)}, expected {sorted(wrong.fails)}:\n{messages}")
    assert detected == set(wrong.tells), (
        f"{wrong.name} showed tells {sorted(detected)}, expected {sorted(wrong.tells)}")
