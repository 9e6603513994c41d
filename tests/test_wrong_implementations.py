"""Every wrong implementation fails exactly its intended items and shows exactly its tells.

The implementations selected for this run are graded up front, a few at a time (each grade is
mostly waiting on its own worker processes), and each test then checks one of them.
"""

from __future__ import annotations

import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.report_length import REPORT_LINES_ONE_BUG, report_lines
from graders.formats.causes import causes, likely
from graders.judge.result import GradeResult
from tests.grading import grade
from graders.shared.compare import SDPA_IS_CAUSAL
from graders.shared.mutation import REFERENCE
from tests.wrong import Wrong, everything

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

WRONG = everything()
PARALLEL = 3
HOSTILE = Path(__file__).parent / "hostile"


@pytest.fixture(scope="module")
def graded(request, tmp_path_factory) -> dict[str, GradeResult]:
    selected = list(
        {
            item.callspec.params["wrong"].name: item.callspec.params["wrong"]
            for item in request.session.items
            if item.module is request.module
            and hasattr(item, "callspec")
            and "wrong" in item.callspec.params
        }.values()
    )  # each graded once
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
    # L6+ is graded once L6 passes: a mutant of L4 to L6 has not started it (result.reported)
    failed = {i.id for i in result.reported if i.status != "pass" and i.id != "own-tests"}
    detected = {t.id for t in result.tells if t.detected}
    messages = "\n".join(f"  {i.id}: {i.status}: {i.message}" for i in result.items)
    assert not result.grader_broke, f"the grader broke:\n{messages}"
    assert failed == set(wrong.fails), (
        f"{wrong.name} failed {sorted(failed)}, expected {sorted(wrong.fails)}:\n{messages}"
    )
    assert detected == set(wrong.tells), (
        f"{wrong.name} showed tells {sorted(detected)}, expected {sorted(wrong.tells)}"
    )


# The causes a report must give each wrong implementation that fails several items (issue 44):
# the lead of each cause other than a stub's, in order; one that fails one item leads with it.
# Two for the validation mutants, which reach two items that judge different checks.
CAUSES = {
    "static-batching": ("fcfs",),
    "append-on-heads": ("append-time-dim",),
    "attend-whole-capacity": ("prefix-equivalence",),
    "attend-no-row-mask": ("ragged-batch",),
    "empty_unwritten_slots": ("ragged-batch",),
    "no-scale": ("prefix-equivalence",),
    "scale-one-over-d": ("prefix-equivalence",),
    "softmax-wrong-axis": ("prefix-equivalence",),
    "softmax-no-max": ("stable-softmax",),
    "counts-ignored": ("ragged-batch",),
    "writes-padding": ("ragged-batch",),
    "shared-write-offset": ("ragged-batch",),
    "lengths-python-int": ("append-time-dim",),
    "keys-whole-storage": ("append-time-dim",),
    "attend-drops-query-axis": ("attend-shape",),
    "reprojects-the-prefix": ("kv-only",),
    "reprojects-the-prefix-fused": ("kv-only",),
    "rope-position-zero": ("rope-absolute",),
    "rope-longest-row": ("rope-absolute",),
    "rope-query-unrotated": ("rope-absolute",),
    "rope-key-unrotated": ("rope-absolute",),
    "rope-interleaved": ("rope-absolute",),
    "rope-one-position-late": ("rope-absolute",),
    "rope-at-attend-time": ("rope-absolute",),
    "count-zero-grows": ("ragged-batch",),
    "count-zero-overwrites-last": ("ragged-batch",),
    "chunk-without-causal-mask": ("chunk-causal-mask",),
    "paged-sorted-blocks": ("paged-equivalence",),
    "paged-contiguous-blocks": ("paged-equivalence",),
    "paged-stale-slots": ("paged-equivalence",),
    "paged-no-scale": ("paged-equivalence",),
    "paged-slot-p": ("paged-equivalence",),
    "paged-padding-read": ("paged-equivalence",),
    "fork-copies-blocks": ("paged-cow",),
    "fork-without-refcounts": ("paged-cow",),
    "cow-never-copies": ("paged-cow",),
    "cow-copies-full-blocks": ("paged-cow",),
    "cow-keeps-old-count": ("paged-cow",),
    "grows-only-when-full": ("length-vs-capacity",),
    "fixed-2048-slots": ("length-vs-capacity",),
    "sdpa-is-causal": ("prefix-equivalence",),
    "no-append-validation": ("validate-shapes", "validate-dtype-device"),
    "validates-after-growing": ("validate-shapes", "validate-dtype-device"),
    "attend-returns-float32": ("validate-dtype-device",),
    "attend-no-query-validation": ("validate-shapes", "validate-dtype-device"),
}
# What the lead's likely mistake must point at, where the mutant's mistake has a name.
POINTS_AT = {
    "append-on-heads": "which dimension append grows",
    "no-scale": "the scores' scale",
    "scale-one-over-d": "the scores' scale",
    "softmax-wrong-axis": "the softmax's axis",
    "sdpa-is-causal": "the mask of attention",
    "counts-ignored": "how append uses counts",
    "fixed-2048-slots": "what append does when a row outgrows capacity",
}


@pytest.mark.parametrize("wrong", WRONG, ids=[w.name for w in WRONG])
def test_the_report_leads_with_the_cause_the_mutant_put_in_within_30_lines(wrong, graded):
    """Issue 44: every failing item under one of the causes named, each lead the mutant's, no
    member's own guess printed, the lead's guess pointing where the mutant's mistake is; at
    most 30 lines at 80 columns."""
    result = graded[wrong.name]
    found = causes(result)
    leads = tuple(c.lead.id for c in found if c.lead.status != "not_attempted")
    assert leads == CAUSES.get(wrong.name, tuple(wrong.fails)), [
        (c.lead.id, [m.id for m in c.members]) for c in found
    ]
    assert sorted(i.id for c in found for i in c.items) == sorted(
        i.id for i in result.reported if i.status != "pass"
    )
    lines = report_lines(result)
    text = " ".join(" ".join(lines).split())
    for cause in found:
        for member in cause.members:
            guess = likely(member.message)
            if guess and guess != likely(cause.lead.message):
                assert " ".join(guess.split()) not in text, (member.id, guess)
    if wrong.name in POINTS_AT:
        assert POINTS_AT[wrong.name] in (likely(found[0].lead.message) or ""), found[0].lead
    assert len(lines) <= REPORT_LINES_ONE_BUG, "\n".join(lines)


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
    failed = {
        i.id: i.message for i in runs[0].reported if i.status != "pass" and i.id != "own-tests"
    }
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
    result = grade(
        wrong.write(tmp_path),
        track="serving",
        only={"paged-equivalence", "paged-block-table", "paged-cow", "paged-free"},
    )
    messages = {i.id: i.message for i in result.items}
    for item in ("paged-equivalence", "paged-block-table", "paged-cow"):
        assert (
            "non-finite output (NaN) where the float64 reference is finite: uninitialized or "
            "stale cache slots likely reached attention" in messages[item]
        ), messages[item]
        assert "max abs error" not in messages[item] and "length 0" not in messages[item]
    assert "is not finite even before the append that raised CacheFull" in messages["paged-free"]


def test_writes_dropped_past_capacity_are_named(tmp_path):
    result = grade(
        _by_name("drops-writes-past-capacity").write(tmp_path),
        only={"length-vs-capacity"},
        hidden=True,
    )
    (item,) = result.items
    assert item.status == "fail"
    assert item.message.startswith(
        "KVCache(capacity=16) after 17 positions: lengths are right, "
        "but cache.keys holds only 16 positions (capacity 16)"
    )
    assert "positions appended past the last slot were dropped" in item.message


def test_validity_read_from_the_data_fails_the_public_ragged_batch(tmp_path):
    result = grade(_by_name("valid-from-data").write(tmp_path), only={"ragged-batch"})
    (item,) = result.items
    assert item.status == "fail" and not item.message.startswith("hidden case: ")
    assert item.message.endswith(
        "Likely mistake: a real position whose key is all zeros was left "
        "out: where a slot's validity is read from"
    )


def test_a_fixed_capacity_is_named_at_the_candidates_line_with_the_caches_state(tmp_path):
    """Meta's Llama reference keeps max_seq_len slots and never grows: the message names the
    call, the lengths and capacity at the raise, the line of the candidate's file (not torch's
    _ops.py, where the write raised), and what the contract asks."""
    result = grade(_by_name("fixed-2048-slots").write(tmp_path), only={"prealloc"})
    (item,) = result.items
    assert item.status == "error"
    assert re.match(
        r"`append` of \d+ positions? at lengths \[2048\], capacity 2048 raised "
        r"IndexError: ",
        item.message,
    ), item.message
    assert 'kv_cache.py", line' in item.message and "_ops.py" not in item.message
    assert item.message.endswith(
        "Likely mistake: what append does when a row outgrows "
        "capacity 2048 (this append took a row past it, and raised)"
    )


def test_one_exception_failing_many_items_is_named_once(tmp_path):
    """The same exception (type, message, line of the candidate's file) in several items is
    given whole at the first, and the others say which; statuses and scores are unchanged."""
    path = tmp_path / "kv_cache.py"
    path.write_text(
        REFERENCE.read_text().replace(
            '    if cache.k_storage is None:\n        raise ValueError("attend on an empty cache',
            '    raise RuntimeError("attend is not written yet")\n'
            '    if cache.k_storage is None:\n        raise ValueError("attend on an empty cache',
            1,
        )
    )
    items = {
        i.id: i
        for i in grade(path, only={"attend-shape", "prefix-equivalence", "ragged-batch"}).items
    }
    assert {i.status for i in items.values()} == {"error"}
    assert sum(i.points for i in items.values()) == 0
    first = items["attend-shape"].message
    assert "raised RuntimeError: attend is not written yet (File" in first
    for later in ("prefix-equivalence", "ragged-batch"):
        message = items[later].message
        assert "raised the same error as attend-shape (RuntimeError (File" in message, message
        assert "not written yet" not in message


def test_a_state_too_large_to_send_is_left_out_of_the_message(tmp_path):
    """tests/hostile/lies_about_its_state.py: a capacity of 2 ** 80 and lengths of a million
    rows, read when its append raises. The capacity is not sent, the lengths are cut
    to 64 rows and the message shows 8 of them: a short message, never a malformed reply."""
    path = tmp_path / "kv_cache.py"
    shutil.copy(HOSTILE / "lies_about_its_state.py", path)
    (item,) = grade(path, only={"attend-shape"}).items
    assert item.status == "error"
    assert "malformed" not in item.message and "capacity" not in item.message
    assert "at lengths [0, 1, 2, 3, 4, 5, 6, 7, ...] raised RuntimeError: no room" in item.message
    assert len(item.message) < 400


@pytest.mark.parametrize(
    "name, item, start, end",
    [
        (
            "segmented-reorders-newest",
            "beam-reorder",
            "a 1,100-position cache grown by chunks and "
            "single tokens, then reordered: cache 0, after reorder(cache, [2, 0, 1])",
            "",
        ),
        (
            "release-clears-a-head",
            "release",
            "release(cache, 1) changed cache.keys of rows 0 and 2",
            "",
        ),
        (
            "grows-only-when-full",
            "length-vs-capacity",
            "`append` of 4 positions at lengths [14, 14], capacity 16 raised IndexError",
            "outgrows capacity 16 (this append took a row past it, and raised)",
        ),
        (
            "sdpa-is-causal",
            "prefix-equivalence",
            "one token at a time from an empty cache",
            "Likely mistake: " + SDPA_IS_CAUSAL,
        ),
    ],
)
def test_shipped_bugs_fail_their_item_with_its_message(name, item, start, end, tmp_path):
    """The bugs public caches shipped (tests/wrong/shipped_bugs.py), named by their item."""
    (result,) = grade(_by_name(name).write(tmp_path), only={item}).items
    assert result.status != "pass"
    assert result.message.startswith(start) and result.message.endswith(end), result.message
