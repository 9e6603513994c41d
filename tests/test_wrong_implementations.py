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


def _by_name(name: str) -> Wrong:
    return next(w for w in WRONG if w.name == name)


def test_reads_of_unwritten_slots_fail_alike_every_run_and_are_named(tmp_path):
    """torch.empty storage whose shorter rows read slots never written passed ragged-batch on
    most runs, whatever the allocator handed back; the worker's NaN fill makes it fail the same
    items with the same messages every time, public and hidden (the seed is the suite's)."""
    wrong = _by_name("empty_unwritten_slots")
    path = wrong.write(tmp_path)
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = list(pool.map(lambda _: grade(path, hidden=True), range(3)))
    verdicts = [[(i.id, i.status, i.message) for i in r.items if i.id != "own-tests"] for r in runs]
    assert verdicts[0] == verdicts[1] == verdicts[2]
    failed = {i.id: i.message for i in runs[0].items if i.status != "pass" and i.id != "own-tests"}
    # Hidden, stable-softmax's rows have different lengths as well: the shorter ones read past it.
    assert set(failed) == set(wrong.fails) | {"stable-softmax"}
    for item, message in failed.items():
        assert "non-finite output (NaN) where the float64 reference is finite" in message, item
        assert "uninitialized or stale cache slots likely reached attention" in message, item
        assert "max abs error" not in message, item


def test_padding_read_by_a_paged_cache_is_named_as_such(tmp_path):
    """NaN from the never-written block that pads a block table is a read past the sequence's
    length, on the serving track too: named so, not as an error of inf or a CacheFull problem."""
    wrong = _by_name("paged-padding-read")
    result = grade(wrong.write(tmp_path), track="serving",
                   only={"paged-equivalence", "paged-block-table", "paged-cow", "paged-free"})
    messages = {i.id: i.message for i in result.items}
    for item in ("paged-equivalence", "paged-block-table", "paged-cow"):
        assert "non-finite output (NaN) where the float64 reference is finite: uninitialized or " \
               "stale cache slots likely reached attention" in messages[item], messages[item]
        assert "max abs error" not in messages[item] and "length 0" not in messages[item]
    assert "is not finite even before the append that raised CacheFull" in messages["paged-free"]


def test_writes_dropped_past_capacity_are_named(tmp_path):
    result = grade(_by_name("drops-writes-past-capacity").write(tmp_path),
                   only={"length-vs-capacity"}, hidden=True)
    (item,) = result.items
    assert item.status == "fail"
    assert item.message.startswith("KVCache(capacity=16) after 17 positions: lengths are right, "
                                   "but cache.keys holds only 16 positions (capacity 16)")
    assert "positions appended past the last slot were dropped" in item.message


def test_validity_read_from_the_data_fails_the_public_ragged_batch(tmp_path):
    result = grade(_by_name("valid-from-data").write(tmp_path), only={"ragged-batch"})
    (item,) = result.items
    assert item.status == "fail" and not item.message.startswith("hidden case: ")
    assert item.message.endswith("Likely mistake: a real position whose key is all zeros was left "
                                 "out. Is a slot's validity read from its data rather than from "
                                 "lengths?")
