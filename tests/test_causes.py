"""graders.formats.causes on GradeResults built here: which evidence puts an item under another's
cause, and which does not. Real grades of every wrong implementation: test_report_causes.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from graders.formats.causes import LIKELY, cause_of, causes, evidence, likely
from graders.judge.result import GradeResult, ItemResult
from graders.shared.rubric import load
from graders.shared.tracks import DENSE

RAISED = ("ValueError", "heads: 4 are not a multiple of 8", ' (File "kv_cache.py", line 112)')


def graded(**outcomes: tuple) -> GradeResult:
    """A dense grade: every item passes but those named (id with "_" for "-"), each given as
    (status, message) or (status, message, signature)."""
    items = []
    for info in load().track(DENSE):
        status, message, *signature = outcomes.get(info.id.replace("-", "_"), ("pass", "fine"))
        items.append(
            ItemResult(
                info.id,
                info.level,
                status,
                info.points if status == "pass" else 0.0,
                info.points,
                message,
                signature=signature[0] if signature else None,
            )
        )
    return GradeResult("kv_cache.py", None, items, [], False)


def test_an_item_whose_dependency_fails_is_under_that_cause_followed_through():
    result = graded(
        prefix_equivalence=("fail", "off at prefix 2"),
        ragged_batch=("fail", "row 1 off"),
        release=("fail", "row 0 off"),
        finished_beams=("fail", "row 2 off"),
    )
    (cause,) = causes(result)
    assert cause.lead.id == "prefix-equivalence"
    assert [m.id for m in cause.members] == ["release", "ragged-batch", "finished-beams"]
    assert set(cause.joined) == {"depends"}
    assert cause.points_lost == 8 + 5 + 4 + 5


def test_an_item_whose_dependencies_pass_leads_a_cause_of_its_own():
    result = graded(validate_shapes=("fail", "no ValueError"), gqa=("fail", "head 3 off"))
    assert [(c.lead.id, c.members) for c in causes(result)] == [
        ("validate-shapes", ()),
        ("gqa", ()),
    ]


def test_one_exception_from_one_place_is_one_cause_whatever_its_numbers():
    other = (RAISED[0], "heads: 2 are not a multiple of 4", RAISED[2])
    elsewhere = (RAISED[0], RAISED[1], ' (File "kv_cache.py", line 90)')
    result = graded(
        validate_shapes=("error", "a", RAISED),
        reset=("error", "b", other),
        kv_only=("error", "c", elsewhere),
    )
    found = causes(result)
    assert [(c.lead.id, [m.id for m in c.members]) for c in found] == [
        ("validate-shapes", ["reset"]),
        ("kv-only", []),
    ]
    assert found[0].joined == ("exception",)


def test_hangs_are_one_cause():
    result = graded(
        validate_shapes=("timeout", "hung"),
        reset=("timeout", "hung too"),
        own_tests=("timeout", "not run: the implementation already hung"),
    )
    (cause,) = causes(result)
    assert cause.lead.id == "validate-shapes" and cause.joined == ("hang", "hang")


def test_the_same_likely_mistake_is_one_cause_and_another_is_not():
    same = f"off{LIKELY}the scores' scale"
    result = graded(
        validate_shapes=("fail", same),
        reset=("fail", "other" + same),
        kv_only=("fail", f"off{LIKELY}the softmax's axis"),
    )
    assert [(c.lead.id, [m.id for m in c.members]) for c in causes(result)] == [
        ("validate-shapes", ["reset"]),
        ("kv-only", []),
    ]


def test_stubs_group_by_message_never_by_dependency_and_come_after_failures():
    stub = "`append` still raises NotImplementedError"
    result = graded(
        append_time_dim=("not_attempted", stub),
        attend_shape=("not_attempted", stub),
        kv_only=("not_attempted", "`decode_step` still raises NotImplementedError"),
        validate_shapes=("fail", "no ValueError"),
        gqa=("fail", "head 3 off"),
    )
    found = causes(result)
    assert [(c.lead.id, [m.id for m in c.members]) for c in found] == [
        ("gqa", []),
        ("append-time-dim", ["attend-shape", "validate-shapes"]),
        ("kv-only", []),
    ], "a failure of code that runs first; kv-only's stub is its own, not append's"
    assert found[1].joined == ("not-attempted", "depends"), "a failure of what needs a stub"


def test_items_graded_first_lead_and_items_not_run_are_left_to_the_closing_block():
    result = graded(validate_shapes=("fail", "a"), gqa=("fail", "b"))
    assert [c.lead.id for c in causes(result, {"gqa"})] == ["gqa", "validate-shapes"]
    result = replace(
        result,
        items=[
            replace(result.items[0], unavailable="the file does not import", status="error"),
            *result.items[1:],
        ],
    )
    assert "append-time-dim" not in cause_of(result)
    assert cause_of(result) == {"validate-shapes": "validate-shapes", "gqa": "gqa"}


@pytest.mark.parametrize(
    "message, seen, guessed",
    [
        (f"off by 1.2{LIKELY}the scores' scale", "off by 1.2", "the scores' scale"),
        ("off by 1.2", "off by 1.2", None),
    ],
    ids=["with a likely mistake", "without"],
)
def test_evidence_is_what_the_item_saw_and_likely_what_it_guessed(message, seen, guessed):
    assert evidence(message) == seen and likely(message) == guessed
