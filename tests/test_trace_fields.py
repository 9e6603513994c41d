"""A batching trace's fields at the caps of graders.judge.replies' trace check, met exactly and
one past: what the driver can record is accepted, one more is a malformed reply. The trace is
tests/test_replies_trace.py's, on its workload of two requests (no model runs)."""

from __future__ import annotations

import copy

import pytest

from graders.judge import replies
from graders.worker.batching import ENTRIES_PER_SEQ, ID_CHARS, Entry, Trace
from tests.test_replies_trace import ERRED, TRACE, WORKLOAD

STEPS = len(TRACE["steps"])


def check(trace: dict, max_steps: int = 20) -> Trace:
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


@pytest.mark.parametrize("max_steps, ok", [(STEPS, True), (STEPS - 1, False)], ids=["at", "past"])
def test_a_trace_of_max_steps_is_accepted_one_more_is_not(max_steps, ok):
    assert accepted(copy.deepcopy(TRACE), max_steps) == ok


@pytest.mark.parametrize(
    "ids, ok", [(["a", "b"], True), (["a", "b", "a"], False)], ids=["at", "past"]
)
def test_a_step_finishes_at_most_the_workload_s_requests(ids, ok):
    assert accepted(changed(lambda t: t["steps"][-1].__setitem__("finished", ids))) == ok


@pytest.mark.parametrize(
    "value, ok", [(2**63 - 1, True), (2**63, False), (-(2**63), True), (-(2**63) - 1, False)]
)
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
        trace["error"].update(
            type="T" * (ID_CHARS + 9), message="m" * 5_000, traceback="t" * 9_000 + "END"
        )

    error = check(changed(long, ERRED)).error
    assert error.type.startswith("T") and len(error.type) == ID_CHARS
    assert len(error.message) == 2_000 and error.message.startswith("m")
    assert len(error.traceback) == replies.MAX_TAIL and error.traceback.endswith("END")


def test_a_checked_entry_is_the_entry_as_sent():
    checked = check(changed(lambda t: t["steps"][0]["batch"].append(["z", 5, 6, [1, 2]])))
    assert checked.steps[0].batch[-1] == Entry("z", 5, 6, (1, 2))


# --- the adds and the clock: requests added in arrival order once arrived, steps in order ---


def workload(*requests) -> dict:
    """(id, prompt, max_new_tokens, arrival) requests; request n produces 10n, 10n+1, ..."""
    return {
        "config": WORKLOAD["config"],
        "requests": [
            {"id": i, "prompt": p, "max_new_tokens": m, "eos": None, "arrival": a}
            for i, p, m, a in requests
        ],
        "oracle": {i: [10 * n + k for k in range(m)] for n, (i, _, m, _) in enumerate(requests)},
    }


def driven(load: dict) -> dict:
    from graders.batching.reference import ReferenceScheduler, Request
    from graders.worker.batching import drive

    return drive(ReferenceScheduler, load, 20, request_type=Request)


def accepted_on(load: dict, trace: dict) -> bool:
    ops = [{"op": "drive_scheduler", "workload": load, "max_steps": 20}]
    try:
        replies.plan_reply({"results": [{"ok": trace}]}, ops)
    except replies.MalformedReply:
        return False
    return True


# Arrival order differs from the order of ids, of prompts and of the list.
OUT_OF_ORDER = workload(("a", [1, 2, 3], 1, 1), ("b", [4, 5], 1, 0))
ALONE = workload(("a", [1, 2, 3], 2, 0))


def test_adds_in_arrival_order_are_accepted_whatever_the_order_of_ids_or_prompts():
    trace = driven(OUT_OF_ORDER)
    assert [add["id"] for add in trace["adds"]] == ["b", "a"] and trace["error"] is None
    assert accepted_on(OUT_OF_ORDER, trace)
    swapped = copy.deepcopy(trace)
    swapped["adds"].reverse()
    assert not accepted_on(OUT_OF_ORDER, swapped)


def test_an_add_more_than_the_workload_s_requests_is_malformed():
    assert not accepted(changed(lambda t: t["adds"].append(dict(t["adds"][0]))))


def test_an_add_before_its_arrival_is_malformed():
    assert TRACE["adds"][1] == {"id": "b", "at": 1}
    assert not accepted(changed(lambda t: t["adds"][1].__setitem__("at", 0)))


def test_a_step_before_the_driver_s_first_clock_is_malformed():
    idle = {
        "at": -1,
        "batch": [],
        "produced": {},
        "finished": [],
        "free_after_schedule": None,
        "free_after_update": None,
    }
    assert not accepted(changed(lambda t: t["steps"].insert(0, idle)))


def test_two_steps_at_one_clock_are_malformed():
    trace = driven(ALONE)
    assert [step["at"] for step in trace["steps"]] == [0, 1] and accepted_on(ALONE, trace)
    trace["steps"][1]["at"] = 0
    assert not accepted_on(ALONE, trace)
    ops = [{"op": "drive_scheduler", "workload": ALONE, "max_steps": 20}]
    with pytest.raises(replies.MalformedReply, match="step 1 is at int 0, not after 0"):
        replies.plan_reply({"results": [{"ok": trace}]}, ops)  # the message names the clock


def test_a_request_scheduled_before_it_was_added_produces_nothing():
    def early(trace):
        trace["steps"][0]["batch"].append(["b", 0, 2, []])
        trace["steps"][0]["produced"]["b"] = 9

    with pytest.raises(replies.MalformedReply, match="step 0's produced tokens are not"):
        check(changed(early))


def test_a_step_at_a_request_s_arrival_without_its_add_is_malformed():
    trace = driven(ALONE)  # a's two steps, at 0 and 1; b arrives at 1 and is never added
    late = workload(("a", [1, 2, 3], 2, 0), ("b", [4, 5], 1, 1))
    late["oracle"]["a"] = ALONE["oracle"]["a"]
    assert not accepted_on(late, trace)
