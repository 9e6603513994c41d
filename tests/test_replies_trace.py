"""A batching drive's trace where it enters the judge (graders.judge.replies' `drive_trace` and
`_entry`), on a workload of two requests written here (its oracle is data: no model runs).

A driver's trace comes out of the check as the driver's types (graders.worker.batching's
`Trace`, frozen), holding what the driver recorded; every field of the trace, given a value of a
type the driver never records, is a malformed reply (never a value the replay then crashes on);
and a scheduler's own exception at any call and any step comes back as the trace's error naming
that step, which the items' verdict names too.
"""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import pytest

from graders.batching import grading
from graders.batching.reference import ReferenceScheduler, Request
from graders.judge import replies
from graders.shared.plans import CandidateError
from graders.worker.batching import DriveError, Entry, Step, Trace, drive

WORKLOAD = {
    "config": {
        "num_blocks": 8,
        "block_size": 4,
        "max_num_seqs": 2,
        "max_batched_tokens": 8,
        "prefix_caching": False,
    },
    "requests": [
        {"id": "a", "prompt": [1, 2, 3], "max_new_tokens": 2, "eos": None, "arrival": 0},
        {"id": "b", "prompt": [4, 5], "max_new_tokens": 1, "eos": None, "arrival": 1},
    ],
    "oracle": {"a": [7, 8], "b": [9]},
}
MAX_STEPS = 20
CALLS = ("add", "has_work", "schedule", "num_free_blocks", "update")


class Raising(ReferenceScheduler):
    """The reference scheduler, raising ValueError at its `call` of step `step` (the step's
    index in the trace: schedule() calls made before, or by, that step)."""

    def __init__(self, *args, call: str = "", step: int = -1, **kwargs):
        super().__init__(*args, **kwargs)
        self.call, self.step, self.scheduled, self.inside = call, step, 0, False

    def _maybe(self, call: str, step: int) -> None:
        if (call, step) == (self.call, self.step) and not self.inside:  # the driver's call
            raise ValueError(f"{call} failed at step {step}")

    def add(self, request):
        self._maybe("add", self.scheduled)
        return super().add(request)

    def has_work(self):
        self._maybe("has_work", self.scheduled)
        return super().has_work()

    def schedule(self):
        self._maybe("schedule", self.scheduled)
        self.scheduled += 1
        self.inside = True  # the reference reads its own num_free_blocks
        try:
            return super().schedule()
        finally:
            self.inside = False

    @property
    def num_free_blocks(self):
        self._maybe("num_free_blocks", self.scheduled - 1)
        return super().num_free_blocks

    def update(self, new_tokens):
        self._maybe("update", self.scheduled - 1)
        self.inside = True
        try:
            return super().update(new_tokens)
        finally:
            self.inside = False


def driven(call: str = "", step: int = -1) -> dict:
    return drive(
        lambda **config: Raising(**config, call=call, step=step),
        WORKLOAD,
        MAX_STEPS,
        request_type=Request,
    )


def check(trace: dict) -> Trace:
    ops = [{"op": "drive_scheduler", "workload": WORKLOAD, "max_steps": MAX_STEPS}]
    return replies.plan_reply({"results": [{"ok": trace}]}, ops)["results"][0]["ok"]


def plain(trace: Trace) -> dict:
    """A checked trace as the driver's plain data again (graders.worker.batching's wire form)."""
    return {
        "steps": [
            {
                "at": s.at,
                "batch": [[e.seq_id, e.start, e.tokens, list(e.table)] for e in s.batch],
                "produced": dict(s.produced),
                "finished": list(s.finished),
                "free_after_schedule": s.free_after_schedule,
                "free_after_update": s.free_after_update,
            }
            for s in trace.steps
        ],
        "adds": [{"id": a.seq_id, "at": a.at} for a in trace.adds],
        "error": None if trace.error is None else dataclasses.asdict(trace.error),
        "stalled": trace.stalled,
    }


TRACE = driven()
STEPS = len(TRACE["steps"])
ERRED = driven("update", 1)  # a trace with an error, its step 1 not completed


def test_the_workload_s_trace_holds_what_the_field_checks_read():
    assert TRACE["error"] is None and not TRACE["stalled"] and STEPS >= 2
    assert TRACE["steps"][0]["batch"][0][3] and TRACE["steps"][0]["produced"] == {"a": 7}
    assert any(step["finished"] for step in TRACE["steps"]) and len(TRACE["adds"]) == 2
    assert ERRED["error"]["call"] == "update" and len(ERRED["steps"]) == 1
    assert plain(check(copy.deepcopy(TRACE))) == TRACE
    assert plain(check(copy.deepcopy(ERRED))) == ERRED


def test_the_check_returns_the_driver_s_frozen_types_which_the_replay_reads():
    trace = check(copy.deepcopy(TRACE))
    first = trace.steps[0]
    assert type(trace) is Trace and type(first) is Step and type(first.batch[0]) is Entry
    assert first.produced == {"a": 7} and first.batch[0].table == tuple(
        TRACE["steps"][0]["batch"][0][3]
    )
    assert type(check(copy.deepcopy(ERRED)).error) is DriveError
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.at = 5
    assert replies.drive_trace(copy.deepcopy(TRACE), WORKLOAD, MAX_STEPS) == trace


def test_the_wire_keys_checked_are_the_types_fields():
    assert {f.name for f in dataclasses.fields(Trace)} == replies.TRACE_KEYS
    assert {f.name for f in dataclasses.fields(Step)} == replies.STEP_KEYS
    assert [f.name for f in dataclasses.fields(DriveError)] == list(replies.DRIVE_ERROR)


FINISHED = next(n for n, step in enumerate(TRACE["steps"]) if step["finished"])
# Each field of the trace, as a path into it, and the types the driver records there.
INT, TEXT, LIST, DICT = (int,), (str,), (list,), (dict,)
FIELDS = {
    ("steps",): LIST,
    ("adds",): LIST,
    ("stalled",): (bool,),
    ("error",): (dict, type(None)),
    ("adds", 0): DICT,
    ("adds", 0, "id"): TEXT,
    ("adds", 1, "at"): INT,
    ("steps", 0): DICT,
    ("steps", 1, "at"): INT,
    ("steps", 0, "batch"): LIST,
    ("steps", 0, "batch", 0): LIST,
    ("steps", 0, "batch", 0, 0): TEXT,
    ("steps", 0, "batch", 0, 1): INT,
    ("steps", 0, "batch", 0, 2): INT,
    ("steps", 0, "batch", 0, 3): LIST,
    ("steps", 0, "batch", 0, 3, 0): INT,
    ("steps", 0, "produced"): DICT,
    ("steps", 0, "produced", "a"): INT,
    ("steps", FINISHED, "finished"): LIST,
    ("steps", FINISHED, "finished", 0): TEXT,
    ("steps", 0, "free_after_schedule"): (int, type(None)),
    ("steps", 0, "free_after_update"): (int, type(None)),
    **{("error", key): (str,) for key in ("call", "kind", "type", "message", "traceback")},
    ("error", "step"): INT,
}


def test_every_field_of_the_trace_is_given_wrong_types():
    assert {path[0] for path in FIELDS} == replies.TRACE_KEYS
    assert {path[2] for path in FIELDS if path[0] == "steps" and len(path) > 2} == replies.STEP_KEYS
    assert {path[4] for path in FIELDS if path[2:3] == ("batch",) and len(path) > 4} == {0, 1, 2, 3}
    assert {path[2] for path in FIELDS if path[0] == "adds" and len(path) > 2} == {"id", "at"}
    assert {path[1] for path in FIELDS if path[0] == "error" and len(path) > 1} == set(
        replies.DRIVE_ERROR
    )


def wrong_values(value) -> dict:
    """Values of other types than `value`'s, by name; the same number as a float or a bool too,
    which compares equal to it."""
    found = {"float": 2.0, "str": "x", "list": [1], "none": None, "bool": True, "dict": {}}
    if type(value) is int:
        found["same-float"] = float(value)
        if value in (0, 1):
            found["same-bool"] = bool(value)
    return found


CASES = [
    pytest.param(path, wrong, id="/".join(map(str, path)) + f"={name}")
    for path, types in FIELDS.items()
    for name, wrong in wrong_values(None).items()
    if type(wrong) not in types
]


def at(trace: dict, path: tuple):
    for key in path:
        trace = trace[key]
    return trace


def same_number_cases():
    for path, types in FIELDS.items():
        if types is not INT:
            continue
        base = ERRED if path[0] == "error" else TRACE
        value = at(base, path)
        for name in ("same-float", "same-bool"):
            wrong = wrong_values(value).get(name)
            if wrong is not None:
                yield pytest.param(path, wrong, id="/".join(map(str, path)) + f"={name}")


@pytest.mark.parametrize("path, wrong", CASES + list(same_number_cases()))
def test_a_trace_field_of_a_type_the_driver_never_records_is_a_malformed_reply(path, wrong):
    trace = copy.deepcopy(ERRED if path[0] == "error" and len(path) > 1 else TRACE)
    at(trace, path[:-1])[path[-1]] = wrong
    with pytest.raises(replies.MalformedReply):
        check(trace)


# (call, step) of each call the driver makes, by step: the adds at their arrival's step.
RAISES = [("init", 0), ("add", 0), ("add", 1)] + [
    (call, n)
    for n in range(STEPS)
    for call in ("has_work", "schedule", "num_free_blocks", "update")
]


@pytest.mark.parametrize("call, step", RAISES, ids=[f"{c}-{n}" for c, n in RAISES])
def test_a_scheduler_s_own_exception_at_any_step_is_an_error_naming_the_step(call, step):
    if call == "init":
        trace = drive(
            lambda **config: (_ for _ in ()).throw(ValueError("init failed at step 0")),
            WORKLOAD,
            MAX_STEPS,
            request_type=Request,
        )
    else:
        trace = driven(call, step)
    error = check(trace).error
    assert (error.call, error.step, error.kind, error.type) == (call, step, "raised", "ValueError")
    assert error.message == f"{call} failed at step {step}"
    with pytest.raises(CandidateError) as raised:
        grading.settle([SimpleNamespace(trace=check(trace), case="the tiny workload")])
    assert str(raised.value).startswith(f"the tiny workload, step {step}: ")
    assert "raised ValueError" in str(raised.value)


@pytest.mark.parametrize("step", [-1, "past"], ids=["before-the-first", "past-the-last"])
def test_an_error_at_a_step_the_trace_does_not_reach_is_a_malformed_reply(step):
    trace = copy.deepcopy(ERRED)
    trace["error"]["step"] = len(trace["steps"]) + 1 if step == "past" else step
    with pytest.raises(replies.MalformedReply, match="error is dict"):
        check(trace)
