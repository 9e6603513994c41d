"""The batching driver's caps and checks, each met at its edge (graders.worker.batching).

The driver records what a scheduler did as plain data: every value of the candidate's it keeps
is of the contract's type and within a cap (ids of ID_CHARS, messages and tracebacks of
MESSAGE_CHARS, ENTRIES_PER_SEQ entries per max_num_seqs, tables of num_blocks, ints of int64's
range), and anything else ends the drive with an ERROR naming the call and the step. Each cap
is met here exactly, and one past it. No model runs: the workload's oracle is made up.
"""

from __future__ import annotations

import pytest

from graders.batching.reference import Request, Scheduled
from graders.worker import wire
from graders.worker.batching import ENTRIES_PER_SEQ, ID_CHARS, MESSAGE_CHARS, Entry, drive

CONFIG = {
    "num_blocks": 6,
    "block_size": 4,
    "max_num_seqs": 2,
    "max_batched_tokens": 64,
    "prefix_caching": False,
}  # num_blocks differs from max_num_seqs (a swapped key shows)
LOAD = {
    "config": CONFIG,
    "requests": [{"id": "a", "prompt": [1, 2, 3], "max_new_tokens": 2, "eos": None, "arrival": 0}],
    "oracle": {"a": [7, 8]},
}


class Scripted:
    """Schedules "a" whole, then decodes it; `batch(step, entries)`, `finished(step, ids)` and
    `free` may replace what it returns."""

    def __init__(
        self, num_blocks, block_size, max_num_seqs, max_batched_tokens, *, prefix_caching=False
    ):
        self.step, self.done, self.free = -1, False, num_blocks
        self.added = []

    def add(self, request):
        self.added.append(request)

    def has_work(self):
        return bool(self.added) and not self.done

    @property
    def num_free_blocks(self):
        return self.free

    def entries(self):
        return [Scheduled("a", 0, 3, (0,))] if self.step == 0 else [Scheduled("a", 3, 1, (0,))]

    def batch(self, step, entries):
        return entries

    def schedule(self):
        self.step += 1
        return self.batch(self.step, self.entries())

    def finished(self, step, ids):
        return ids

    def update(self, new_tokens):
        self.done = self.step == 1
        return self.finished(self.step, ["a"] if self.done else [])


def driven(batch=None, finished=None, cls=Scripted, max_steps=10) -> dict:
    """The drive of a Scripted whose step-`n` batch is `batch(n, entries)`, its finished ids
    `finished(n, ids)`."""

    class Changed(cls):
        pass

    if batch is not None:
        Changed.batch = lambda self, step, entries: batch(step, entries)
    if finished is not None:
        Changed.finished = lambda self, step, ids: finished(step, ids)
    return drive(Changed, LOAD, max_steps, request_type=Request)


def returned(trace: dict) -> tuple:
    error = trace["error"]
    assert error is not None and error["kind"] == "returned" and error["type"] == ""
    return error["call"], error["step"], error["message"]


def test_the_scripted_scheduler_s_drive_is_a_clean_one():
    trace = driven()
    assert trace["error"] is None and not trace["stalled"]
    assert [s["batch"] for s in trace["steps"]] == [[["a", 0, 3, [0]]], [["a", 3, 1, [0]]]]
    assert [s["produced"] for s in trace["steps"]] == [{"a": 7}, {"a": 8}]
    assert trace["steps"][1]["finished"] == ["a"]


# --- a batch's entries: at most ENTRIES_PER_SEQ x max_num_seqs ---

MOST = ENTRIES_PER_SEQ * CONFIG["max_num_seqs"]


def test_a_batch_of_exactly_the_most_entries_is_recorded():
    trace = driven(lambda step, entries: entries + [Scheduled("z", 0, 1, ())] * (MOST - 1))
    assert trace["error"] is None and len(trace["steps"][0]["batch"]) == MOST


def test_a_batch_of_one_entry_more_than_the_most_ends_the_drive():
    trace = driven(lambda step, entries: entries + [Scheduled("z", 0, 1, ())] * MOST)
    assert returned(trace) == (
        "schedule",
        0,
        f"schedule() returned {MOST + 1} entries, more "
        f"than {ENTRIES_PER_SEQ} x max_num_seqs ({MOST})",
    )
    assert trace["steps"] == []  # the step that broke it is in the error alone


@pytest.mark.parametrize("value, kind", [(None, "None"), ({"a": 1}, "a dict"), ("a", "a str")])
def test_a_batch_that_is_not_a_list_ends_the_drive_naming_its_type(value, kind):
    trace = driven(lambda step, entries: value if step == 1 else entries)
    assert returned(trace) == ("schedule", 1, f"schedule() returned {kind}, not a list")


# --- an entry: named by its step and its index ---


@pytest.mark.parametrize("at", [0, 1])
def test_an_entry_s_error_names_its_step_and_its_index_in_the_batch(at):
    bad = [Scheduled("z", 0, 1, ())] * 2 + [Scheduled(7, 0, 1, ())]
    trace = driven(lambda step, entries: entries + bad if step == at else entries)
    assert returned(trace) == (
        "schedule",
        at,
        "schedule()'s entry 3 has a seq_id of an int, not a str",
    )


def test_an_entry_whose_field_raises_is_the_scheduler_s_exception():
    class Exploding:
        seq_id = "a"

        @property
        def start(self):
            raise ZeroDivisionError("no start")

    trace = driven(lambda step, entries: [Exploding()])
    error = trace["error"]
    assert (error["call"], error["step"], error["kind"], error["type"], error["message"]) == (
        "schedule",
        0,
        "raised",
        "ZeroDivisionError",
        "no start",
    )


@pytest.mark.parametrize(
    "table, words",
    [
        ([0, 1], None),
        ((0,) * CONFIG["num_blocks"], None),
        (
            (0,) * (CONFIG["num_blocks"] + 1),
            f"a block_table of {CONFIG['num_blocks'] + 1} blocks, "
            f"more than the pool's {CONFIG['num_blocks']}",
        ),
        ({0: 1}, "a block_table of a dict, not a tuple"),
        (None, "a block_table of None, not a tuple"),
        ((0, "1"), "a block_table holding a str, not only ints"),
        ((0, 2**63), "a block_table holding an int out of int64's range, not only ints"),
    ],
    ids=["list", "the-pool", "past-the-pool", "dict", "none", "str", "huge"],
)
def test_a_block_table_is_a_tuple_of_at_most_num_blocks_ints(table, words):
    trace = driven(lambda step, entries: [Scheduled("a", 0, 3, table)] if step == 0 else entries)
    if words is None:
        assert trace["error"] is None and trace["steps"][0]["batch"][0][3] == list(table)
    else:
        assert returned(trace) == ("schedule", 0, f"schedule()'s entry 0 has {words}")


@pytest.mark.parametrize(
    "value, ok",
    [
        (2**63 - 1, True),
        (2**63, False),
        (-(2**63), True),
        (-(2**63) - 1, False),
        (3.0, False),
        (True, False),
    ],
)
def test_a_start_or_tokens_is_an_int_of_int64_s_range(value, ok):
    for field in ("start", "tokens"):
        entry = {"seq_id": "a", "start": 0, "tokens": 3, "block_table": (0,), field: value}
        trace = driven(lambda step, entries: [Scheduled(**entry)] if step == 0 else entries)
        if ok:
            assert (
                trace["error"] is None
                and trace["steps"][0]["batch"][0][("start", "tokens").index(field) + 1] == value
            )
        else:
            assert returned(trace)[:2] == ("schedule", 0)
            assert f"has a {field} of " in returned(trace)[2]


def test_an_id_is_recorded_cut_to_id_chars():
    long_id = "q" * (ID_CHARS + 50)
    trace = driven(
        lambda step, entries: [Scheduled(long_id, 0, 1, ())] + entries,
        lambda step, ids: [long_id] + ids,
    )
    assert trace["steps"][0]["batch"][0][0] == "q" * ID_CHARS
    assert trace["steps"][0]["finished"] == ["q" * ID_CHARS]


# --- update's finished ids ---


@pytest.mark.parametrize(
    "value, words",
    [
        (None, "update() returned None, not a list"),
        ("a", "update() returned a str, not a list"),
        (["a", "b"], "update() returned 2 finished ids, more than the workload's 1 requests"),
        ([b"a"], "update() returned a finished id of a bytes, not a str"),
    ],
    ids=["none", "str", "too-many", "bytes"],
)
def test_finished_ids_are_a_list_of_at_most_the_workload_s_requests(value, words):
    trace = driven(finished=lambda step, ids: value)
    assert returned(trace) == ("update", 0, words)


@pytest.mark.parametrize(
    "value", [("a",), {"a"}, frozenset({"a"})], ids=["tuple", "set", "frozenset"]
)
def test_finished_ids_of_any_collection_the_contract_allows_are_recorded(value):
    trace = driven(finished=lambda step, ids: value if step == 1 else ids)
    assert trace["error"] is None and trace["steps"][1]["finished"] == ["a"]


# --- has_work ---


def test_has_work_that_is_not_a_bool_ends_the_drive():
    class Maybe(Scripted):
        def has_work(self):
            return "yes"

    assert returned(driven(cls=Maybe)) == ("has_work", 0, "has_work() returned a str, not a bool")


# --- the scheduler's exceptions: their type, message and traceback cut to the caps ---


def raising(exc: BaseException):
    class Raising(Scripted):
        def schedule(self):
            raise exc

    return driven(cls=Raising)["error"]


def test_a_long_message_and_traceback_are_cut_to_message_chars():
    error = raising(ValueError("m" * (MESSAGE_CHARS + 10) + "END"))
    assert error["message"] == "m" * MESSAGE_CHARS, "the message's start is kept"
    assert len(error["traceback"]) == MESSAGE_CHARS and error["traceback"].endswith("END\n")


def test_a_message_of_message_chars_is_kept_whole():
    assert raising(ValueError("m" * MESSAGE_CHARS))["message"] == "m" * MESSAGE_CHARS


def test_a_long_exception_type_name_is_cut_to_id_chars_in_the_error_and_in_a_kind():
    name = "E" * (ID_CHARS + 20)
    error = raising(type(name, (Exception,), {})("boom"))
    assert error["type"] == "E" * ID_CHARS
    odd = type(name, (), {})()
    trace = driven(lambda step, entries: odd)
    assert returned(trace)[2] == f"schedule() returned an {'E' * ID_CHARS}, not a list"


def test_a_keyboard_interrupt_is_not_the_scheduler_s_error():
    """The judge drives its reference in-process: Ctrl-C stops the judge, never becomes a
    verdict on the scheduler."""
    with pytest.raises(KeyboardInterrupt):
        raising(KeyboardInterrupt())


def test_system_exit_is_the_scheduler_s_error():
    assert (raising(SystemExit(3))["type"], raising(SystemExit(3))["kind"]) == (
        "SystemExit",
        "raised",
    )


# --- the loop: idle time, stalls, max_steps, num_free_blocks not written yet ---


def test_idle_time_is_skipped_and_a_request_is_added_when_it_arrives():
    late = {**LOAD, "requests": [{**LOAD["requests"][0], "arrival": 5}]}
    trace = drive(Scripted, late, 10, request_type=Request)
    assert trace["adds"] == [{"id": "a", "at": 5}]
    assert [step["at"] for step in trace["steps"]] == [5, 6] and trace["error"] is None


def test_an_empty_batch_while_work_exists_stalls_the_drive_after_that_step():
    trace = driven(lambda step, entries: [] if step == 1 else entries)
    assert trace["stalled"] and len(trace["steps"]) == 2 and trace["error"] is None


def test_a_drive_stops_at_max_steps_stalled():
    class Forever(Scripted):
        def update(self, new_tokens):
            return []

    trace = driven(cls=Forever, max_steps=4)
    assert trace["stalled"] and len(trace["steps"]) == 4 and trace["error"] is None


def test_has_work_may_be_an_int():
    class Counting(Scripted):
        def has_work(self):
            return int(super().has_work())

    trace = driven(cls=Counting)
    assert trace["error"] is None and len(trace["steps"]) == 2


def test_num_free_blocks_not_written_yet_is_none_and_any_other_exception_an_error():
    class Unwritten(Scripted):
        @property
        def num_free_blocks(self):
            raise NotImplementedError

    class Broken(Scripted):
        @property
        def num_free_blocks(self):
            raise KeyError("free")

    trace = driven(cls=Unwritten)
    assert trace["error"] is None
    assert {s["free_after_schedule"] for s in trace["steps"]} == {None}
    assert {s["free_after_update"] for s in trace["steps"]} == {None}
    error = driven(cls=Broken)["error"]
    assert (error["call"], error["step"], error["type"]) == ("num_free_blocks", 0, "KeyError")
    assert driven()["steps"][0]["free_after_update"] == CONFIG["num_blocks"]


def test_an_entry_without_a_field_is_not_a_scheduled():
    class Partial:
        seq_id, start, block_table = "a", 0, ()

    assert returned(driven(lambda step, entries: [Partial()])) == (
        "schedule",
        0,
        "schedule()'s entry 0 is a Partial without a tokens, not a Scheduled",
    )


def test_a_start_out_of_int64_s_range_is_named_so():
    trace = driven(lambda step, entries: [Scheduled("a", 2**63, 3, (0,))])
    assert returned(trace)[2] == (
        "schedule()'s entry 0 has a start of an int out of int64's "
        "range, not an int of int64's range"
    )


# --- what a batch produces: the oracle's next token, once a step, for an entry up to the
# last known token ---


@pytest.mark.parametrize(
    "entries, produced",
    [
        ([("a", 0, 3)], {"a": 7}),
        ([("a", 0, 2)], {}),  # short of the last known token
        ([("a", 1, 2)], {"a": 7}),  # a chunk ending at it
        ([("a", -1, 4)], {}),  # a start before the sequence
        ([("a", 3, 0)], {}),  # no token computed
        ([("z", 0, 3)], {}),  # a request never added
        ([("a", 0, 3), ("a", 2, 1)], {"a": 7}),  # once a step
        ([("z", 0, 1), ("a", 0, 3)], {"a": 7}),
    ],
    ids=[
        "prefill",
        "short",
        "chunk",
        "negative-start",
        "no-tokens",
        "unknown",
        "twice",
        "after-another",
    ],
)
def test_an_entry_produces_only_when_it_computes_up_to_the_last_known_token(entries, produced):
    batch = [Scheduled(s, start, tokens, (0,)) for s, start, tokens in entries]
    trace = driven(lambda step, entries_: batch if step == 0 else entries_)
    assert trace["steps"][0]["produced"] == produced


def test_a_request_with_all_its_tokens_produces_nothing_more():
    class Again(Scripted):
        def entries(self):
            return [Scheduled("a", 0, 3 + min(self.step, 2), (0,))]

        def update(self, new_tokens):
            self.done = self.step == 3
            return []

    trace = driven(cls=Again)
    assert [s["produced"] for s in trace["steps"]] == [{"a": 7}, {"a": 8}, {}, {}]


def test_an_exception_whose_message_cannot_be_read_is_recorded_so():
    class Loud(Exception):
        def __str__(self):
            raise RuntimeError("no message for you")

    error = raising(Loud())
    assert (error["type"], error["message"]) == (
        "Loud",
        "<the exception's message could not be read>",
    )


# --- the requests: added in arrival order (ties in the workload's order), as given ---


def test_requests_are_added_in_arrival_order_ties_in_the_workload_s_order():
    requests = [
        {"id": i, "prompt": [1, 2], "max_new_tokens": 1, "eos": None, "arrival": t}
        for i, t in (("a", 2), ("c", 0), ("b", 0))
    ]
    load = {"config": CONFIG, "requests": requests, "oracle": {"a": [7], "b": [8], "c": [9]}}

    class Nothing(Scripted):
        def has_work(self):
            return False

    trace = drive(Nothing, load, 10, request_type=Request)
    assert trace["adds"] == [{"id": "c", "at": 0}, {"id": "b", "at": 0}, {"id": "a", "at": 2}]


def test_add_receives_the_workload_s_request_as_the_candidate_s_type():
    seen = []

    class Seeing(Scripted):
        def add(self, request):
            seen.append(request)
            super().add(request)

    load = {**LOAD, "requests": [{**LOAD["requests"][0], "eos": 5}]}
    assert drive(Seeing, load, 10, request_type=Request)["error"] is None
    assert seen == [Request(id="a", prompt=(1, 2, 3), max_new_tokens=2, eos=5)]


def test_num_free_blocks_that_is_not_an_int_ends_the_drive():
    class Plenty(Scripted):
        num_free_blocks = "plenty"

    assert returned(driven(cls=Plenty)) == (
        "num_free_blocks",
        0,
        "num_free_blocks is a str, not an int",
    )


def test_the_caps_are_the_documented_ones():
    """A message or traceback is cut where the wire cuts a candidate's text (4,000 characters),
    an id at 100, a batch at 4 entries per max_num_seqs; the trace's schema (graders.judge.
    replies) reads the same constants."""
    assert (MESSAGE_CHARS, ID_CHARS, ENTRIES_PER_SEQ) == (4_000, 100, 4)
    assert MESSAGE_CHARS == wire.TEXT_CHARS


@pytest.mark.parametrize(
    "start, tokens, computed",
    [(0, 3, 3), (0, 8, 5), (2, 2, 2), (3, 4, 2), (5, 2, 0), (7, 1, 0)],
    ids=["inside", "whole-prompt-and-past", "a-chunk", "the-prompt-s-end", "at-the-end", "past"],
)
def test_an_entry_computes_the_prompt_positions_it_covers(start, tokens, computed):
    """Of a prompt of 5 tokens: the positions start..start + tokens - 1 that are < 5."""
    assert Entry("a", start, tokens, ()).prompt_positions(5) == computed
