"""A batching trace's fields at the caps of graders.judge.replies' trace check, met exactly and
one past: what the driver can record is accepted, one more is a malformed reply. The trace is
tests/test_replies_trace.py's, on its workload of two requests (no model runs)."""

from __future__ import annotations

import copy

import pytest

from graders.judge import replies
from graders.worker.batching import ENTRIES_PER_SEQ, ID_CHARS
from tests.test_replies_trace import ERRED, TRACE, WORKLOAD

STEPS = len(TRACE["steps"])


def check(trace: dict, max_steps: int = 20) -> dict:
    ops = [{"op": "drive_scheduler", "workload": WORKLOAD, "max_steps": max_steps}]
    return replies.plan_reply({"results": [{"ok": trace}]}, ops)["results"][0]["ok"]


def changed(change, base=TRACE) -> dict:
    trace = copy.deepcopy(base)
    change(trace)
    return trace


def accepted(trace: dict, max_steps: int = 20) -> bool:
    try:
        check(trace, max_steps)
    except replies.MalformedReply:
        return False
    return True


@pytest.mark.parametrize("extra, ok", [(0, True), (1, False)], ids=["at", "past"])
def test_an_id_of_id_chars_is_accepted_one_more_is_not(extra, ok):
    long_id = "q" * (ID_CHARS + extra)
    batch = changed(lambda t: t["steps"][0]["batch"].append([long_id, 0, 1, []]))
    finished = changed(lambda t: t["steps"][-1]["finished"].__setitem__(0, long_id))
    assert (accepted(batch), accepted(finished)) == (ok, ok)


@pytest.mark.parametrize("extra, ok", [(0, True), (1, False)], ids=["at", "past"])
def test_a_table_of_num_blocks_is_accepted_one_more_is_not(extra, ok):
    blocks = list(range(WORKLOAD["config"]["num_blocks"] + extra))
    assert accepted(changed(lambda t: t["steps"][0]["batch"][0].__setitem__(3, blocks))) == ok


@pytest.mark.parametrize("extra, ok", [(0, True), (1, False)], ids=["at", "past"])
def test_a_batch_of_the_most_entries_is_accepted_one_more_is_not(extra, ok):
    most = ENTRIES_PER_SEQ * WORKLOAD["config"]["max_num_seqs"]

    def fill(trace):
        batch = trace["steps"][0]["batch"]
        batch.extend([["z", 0, 1, []]] * (most - len(batch) + extra))

    assert accepted(changed(fill)) == ok


@pytest.mark.parametrize("max_steps, ok", [(STEPS, True), (STEPS - 1, False)],
                         ids=["at", "past"])
def test_a_trace_of_max_steps_is_accepted_one_more_is_not(max_steps, ok):
    assert accepted(copy.deepcopy(TRACE), max_steps) == ok


@pytest.mark.parametrize("ids, ok", [(["a", "b"], True), (["a", "b", "a"], False)],
                         ids=["at", "past"])
def test_a_step_finishes_at_most_the_workload_s_requests(ids, ok):
    assert accepted(changed(lambda t: t["steps"][-1].__setitem__("finished", ids))) == ok


@pytest.mark.parametrize("value, ok", [(2**63 - 1, True), (2**63, False), (-2**63, True),
                                       (-2**63 - 1, False)])
def test_a_trace_s_ints_are_of_int64_s_range(value, ok):
    for key in ("free_after_schedule", "free_after_update"):
        assert accepted(changed(lambda t: t["steps"][0].__setitem__(key, value))) == ok, key
    assert accepted(changed(lambda t: t["steps"][0]["batch"][0][3].append(value))) == ok
    entry = changed(lambda t: t["steps"][0]["batch"].append(["z", value, 1, []]))
    assert accepted(entry) == ok


@pytest.mark.parametrize("step, ok", [(0, True), (1, True), (2, False), (-1, False)])
def test_an_error_is_at_a_step_the_trace_reaches_or_the_next(step, ok):
    assert len(ERRED["steps"]) == 1
    assert accepted(changed(lambda t: t["error"].__setitem__("step", step), ERRED)) == ok


def test_an_error_s_texts_are_kept_within_their_caps():
    def long(trace):
        trace["error"].update(type="T" * (ID_CHARS + 9), message="m" * 5_000,
                              traceback="t" * 9_000 + "END")

    error = check(changed(long, ERRED))["error"]
    assert error["type"].startswith("T") and len(error["type"]) == ID_CHARS
    assert len(error["message"]) == 2_000 and error["message"].startswith("m")
    assert len(error["traceback"]) == replies.MAX_TAIL and error["traceback"].endswith("END")


def test_a_checked_entry_is_the_entry_as_sent():
    checked = check(changed(lambda t: t["steps"][0]["batch"].append(["z", 5, 6, [1, 2]])))
    assert checked["steps"][0]["batch"][-1] == ["z", 5, 6, [1, 2]]
