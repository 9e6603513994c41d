"""graders.judge.replies at its edges: each check passes a reply that is well formed exactly at its
bounds and hands back what it read, and fails one just past them with MalformedReply.

Where tests/test_reply_boundary.py feeds every kind of malformed reply, these tests pin what the
mutation score (benchmarks/mutation_score.py) found unpinned: values at their limits (counts of 0,
exactly LARGEST allocation groups, half-precision beam scores), what a check returns for a reply
it accepts, a bool where a number is read, and a pipe closed under `read`. Quick: no worker
process, only the module's functions on bodies built here.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from graders.judge import replies
from graders.shared.untrusted import MAX_QUOTE
from graders.worker import frames, ops, wire

BATCH = "0123456789abcdef"
HUGE = "x" * 100_000
MEASURE = {"op": "append", "measure": True}
INVENTORY = {"op": "inventory", "probes": {"queries": None}}
BEAM_SEARCH = {"op": "beam_search", "steps": 4, "beams": 2}


def only_result(op: dict, result: dict) -> dict:
    """The one checked result of a plan of the single operation `op`."""
    return replies.plan_reply({"results": [result]}, [op])["results"][0]


def measured(largest: list, **counts) -> dict:
    """An append's measurement as the worker's ops.py makes it, with `largest` groups."""
    return {"allocations": 0, "bytes": 0, "held": 0, "largest": largest, **counts}


def beams(scores: torch.Tensor) -> dict:
    """A beam search of BEAM_SEARCH's 4 steps of 2 beams whose scores are `scores`."""
    return {
        "tokens": torch.zeros(4, 2, dtype=torch.int64),  # [steps, beams]
        "beam_idx": torch.zeros(4, 2, dtype=torch.int64),  # [steps, beams]
        "scores": scores,
    }  # [steps, beams]


def test_a_measurement_of_exactly_largest_groups_and_zero_counts_is_read_back_group_by_group():
    groups = [[f"float{n}", [n, 0, 2], n + 10, 0] for n in range(replies.LARGEST)]
    checked = only_result(MEASURE, {"ok": measured(groups, allocations=3, bytes=0, held=7)})["ok"]
    assert checked == {"allocations": 3, "bytes": 0, "held": 7, "largest": groups}


def test_a_measurement_names_its_groups_clipped():
    checked = only_result(MEASURE, {"ok": measured([[HUGE, [1], 1, 1]])})["ok"]
    assert len(checked["largest"][0][0]) <= MAX_QUOTE


@pytest.mark.parametrize(
    "group",
    [
        ["float32", [1], 1],
        ["float32", [1], 1, 1, 1],
        [1, [1], 1, 1],
        ["float32", 1, 1, 1],
        ["float32", [-1], 1, 1],
        ["float32", [1], -1, 1],
        ["float32", [1], 1, -1],
        ["float32", [1], 1.0, 1],
        ["float32", [1], 1, True],
    ],
    ids=[
        "three-fields",
        "five-fields",
        "dtype-a-number",
        "shape-a-number",
        "negative-size",
        "negative-count",
        "negative-bytes",
        "count-a-float",
        "bytes-a-bool",
    ],
)
def test_an_allocation_group_of_the_wrong_shape_is_malformed(group):
    with pytest.raises(replies.MalformedReply, match="allocation group"):
        only_result(MEASURE, {"ok": measured([group])})


def test_a_count_of_zero_passes_and_a_negative_one_does_not():
    rows = {"wq": 0, "wk": 0, "wv": 0}
    step = {"op": "decode_step"}
    checked = only_result(step, {"ok": {"output": torch.zeros(1, 1, 8), "rows": rows}})["ok"]
    assert checked["rows"] == rows
    with pytest.raises(replies.MalformedReply, match="not a count"):
        only_result(step, {"ok": {"output": torch.zeros(1, 1, 8), "rows": {**rows, "wv": -1}}})


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_beam_search_s_scores_of_each_floating_dtype_pass_unchanged(dtype):
    reply = beams(torch.ones(4, 2, dtype=dtype))
    checked = only_result(BEAM_SEARCH, {"ok": reply})["ok"]
    assert checked.keys() == reply.keys()
    assert all(checked[name] is reply[name] for name in reply)


def test_an_inventory_is_read_back_its_texts_clipped():
    entry = {"path": "cache.k", "shape": [1, 0, 4], "dtype": "float32"}
    reply = {"tensors": [entry, {**entry, "path": HUGE}], "held": {"queries": ["cache.q", HUGE]}}
    checked = only_result(INVENTORY, {"ok": reply})["ok"]
    assert checked["tensors"][0] == entry
    assert checked["held"]["queries"][0] == "cache.q"
    assert len(checked["tensors"][1]["path"]) <= MAX_QUOTE
    assert len(checked["held"]["queries"][1]) <= MAX_QUOTE


def test_an_inventory_tensor_of_negative_size_is_malformed():
    entry = {"path": "cache.k", "shape": [1, -1], "dtype": "float32"}
    with pytest.raises(replies.MalformedReply, match="shape"):
        only_result(INVENTORY, {"ok": {"tensors": [entry], "held": {"queries": []}}})


def test_inputs_after_come_back_as_sent_data_less_ones_too():
    op = {"op": "attend", "return_inputs": True, "query": None, "key": None}
    query = torch.ones(1, 1, 1, 4)  # [batch, heads, 1, head_dim]
    key = wire.Opaque("float32", (1, 1, 2, 4), "meta", "torch.Tensor")
    checked = only_result(op, {"ok": None, "inputs_after": {"query": query, "key": key}})
    assert checked["inputs_after"]["query"] is query
    assert checked["inputs_after"]["key"] == key


def test_a_candidate_value_comes_back_whole_its_texts_clipped():
    opaque = wire.Opaque("x" * 10_000, (2, 3), "d" * 10_000, "T" * 10_000)
    value = {"a": [1, "b", {"c": 2.5}], HUGE: [opaque, wire.Repr(HUGE)]}
    checked = only_result({"op": "call"}, {"ok": value})["ok"]
    assert checked["a"] == [1, "b", {"c": 2.5}]
    (key,) = checked.keys() - {"a"}
    assert len(key) <= MAX_QUOTE
    back, text = checked[key]
    assert isinstance(back, wire.Opaque) and back.shape == (2, 3)
    assert max(map(len, (back.dtype, back.device, back.type_name))) <= MAX_QUOTE
    assert isinstance(text, wire.Repr) and len(text) <= MAX_QUOTE


def test_a_traceback_keeps_its_last_frames():
    traceback = "first frame\n" + HUGE + "\nlast frame"
    raised = {"type": "E", "lineage": ["E"], "message": "m", "traceback": traceback}
    kept = only_result({"op": "new"}, {"raised": raised})["raised"]["traceback"]
    assert len(kept) <= replies.MAX_TAIL and traceback.endswith(kept)
    assert kept.endswith("last frame")


def test_an_error_or_an_import_s_status_comes_back_as_it_arrived():
    assert replies.tests_reply({"error": "no tests"}) == {"error": "no tests"}
    for kind in ("loaded", "import-timeout"):
        assert replies.loaded({"status": kind}) == {"status": kind}
    error = {"status": "import-error", "error": "ImportError: x"}
    assert replies.loaded(error) == error


@pytest.mark.parametrize(
    "check",
    [
        lambda: replies.status(
            {"status": "timeout", "index": 0, "batch": BATCH, "seconds": True, "stderr": ""},
            0,
            BATCH,
        ),
        lambda: replies.tests_reply(
            {"exit_code": False, "passed": 0, "failed": 0, "errors": 0, "tests_sha256": "ab"}
        ),
    ],
    ids=["timeout-seconds", "tests-exit-code"],
)
def test_a_bool_where_a_number_is_read_is_malformed(check):
    with pytest.raises(replies.MalformedReply, match="bool"):
        check()


def test_a_message_names_what_arrived():
    for value, named in (
        (torch.zeros(2, 3), "float32 tensor [2, 3]"),
        (7, "int 7"),
        (wire.Opaque("float32", (5,), "meta", "T"), "without data [5]"),
    ):
        with pytest.raises(replies.MalformedReply, match=named.replace("[", r"\[")):
            only_result({"op": "new"}, {"ok": value})


def test_a_pipe_closed_under_read_says_so():
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        with pytest.raises(frames.PipeClosed):
            replies.read(read_end, time.monotonic() + 5, frames.REPLIES)
    finally:
        os.close(read_end)


def raised_on(cache) -> dict:
    """An exception raised on a dense cache whose state at the raise was `cache` (the worker's
    ops.py sends at most ops.CACHE_ROWS rows of its lengths: the judge takes those, no more)."""
    return {
        "raised": {
            "type": "IndexError",
            "lineage": ["IndexError", "Exception"],
            "message": "m",
            "traceback": "",
            "cache": cache,
        }
    }


@pytest.mark.parametrize(
    "cache",
    [
        {},
        {"capacity": 0},
        {"capacity": 2**63 - 1},
        {"capacity": -(2**63)},
        {"lengths": [0] * ops.CACHE_ROWS, "capacity": 2048},
        {"lengths": [2**63 - 1, -(2**63)]},
    ],
    ids=[
        "nothing-held",
        "capacity-0",
        "largest-int64",
        "smallest-int64",
        "every-row-sent",
        "lengths-at-int64-s-bounds",
    ],
)
def test_an_exception_s_cache_state_within_its_bounds_comes_back_as_sent(cache):
    checked = only_result({"op": "append"}, raised_on(cache))["raised"]
    assert checked["cache"] == cache


@pytest.mark.parametrize(
    "cache",
    [
        [],
        {"capacity": 2**63},
        {"capacity": -(2**63) - 1},
        {"capacity": True},
        {"capacity": 1.0},
        {"lengths": [0] * (ops.CACHE_ROWS + 1)},
        {"lengths": 3},
        {"lengths": [2**63]},
        {"lengths": [True]},
        {"lengths": [], "rows": 1},
    ],
    ids=[
        "not-a-dict",
        "capacity-past-int64",
        "capacity-below-int64",
        "capacity-a-bool",
        "capacity-a-float",
        "a-row-more-than-sent",
        "lengths-a-number",
        "a-length-past-int64",
        "a-length-a-bool",
        "an-extra-key",
    ],
)
def test_an_exception_s_cache_state_past_its_bounds_is_malformed(cache):
    with pytest.raises(replies.MalformedReply, match="cache"):
        only_result({"op": "append"}, raised_on(cache))


# The real-model item's generations (graders.worker.real_model): shapes from the operation.
def _generation_op(mode="greedy", batch=2, prompt=5, new=4, beams=3):
    return {
        "op": "real_model",
        "input_ids": torch.zeros(batch, prompt, dtype=torch.int64),
        "mode": mode,
        "new_tokens": new,
        "beams": beams,
        "model": {"config": {"vocab_size": 128}},
    }


def _generation_reply(op, rows=None, **changes):
    batch, prompt = op["input_ids"].shape
    rows = rows or batch * (op["beams"] if op["mode"] == "beam" else 1)
    reply = {
        "sequences": torch.zeros(batch, prompt + op["new_tokens"], dtype=torch.int64),
        "logits": torch.zeros(op["new_tokens"], rows, 128),
        "calls": {name: 1 for name in ("append", "attend", "attend_chunk", "reorder", "truncate")},
    }
    return {**reply, **changes}


def test_a_generation_reply_is_checked_against_the_operation():
    op = _generation_op()
    assert replies._ok(_generation_reply(op), op, "r")["logits"].shape == (4, 2, 128)
    beam = _generation_op("beam")
    assert replies._ok(_generation_reply(beam), beam, "r")["logits"].shape == (4, 6, 128)
    malformed = [
        _generation_reply(op, rows=3),  # rows the operation did not ask for
        _generation_reply(op, logits=torch.zeros(4, 2, 128, dtype=torch.float64)),
        _generation_reply(op, sequences=torch.zeros(2, 8, dtype=torch.int64)),
        {**_generation_reply(op), "extra": 1},
        _generation_reply(op, calls={"append": -1}),
        _generation_reply(
            op,
            calls={
                "append": 1,
                "attend": 1,
                "attend_chunk": 1,
                "reorder": 1,
                "truncate": 1,
                "forged": 2,
            },
        ),
        {"missing": ["os.system"]},
        {"missing": []},
        {"mismatch": 7, "calls": _generation_reply(op)["calls"]},
    ]
    for reply in malformed:
        with pytest.raises(replies.MalformedReply):
            replies._ok(reply, op, "r")
    reference = {**op, "op": "real_model_reference"}
    with pytest.raises(replies.MalformedReply):  # a reference worker counts no calls
        replies._ok(_generation_reply(op), reference, "r")
    with pytest.raises(replies.MalformedReply):  # nor says a file lacks names: it has none
        replies._ok({"missing": ["truncate"]}, reference, "r")
    calls = _generation_reply(op)["calls"]
    long = replies._ok({"mismatch": "x" * 10_000, "calls": calls}, op, "r")
    assert len(long["mismatch"]) < 2_100
    assert replies._ok({"missing": ["truncate", "truncate"]}, op, "r") == {"missing": ["truncate"]}


# What a check hands back for a reply it accepts is what was sent, each value in its place; and a
# malformed reply's message says what is wrong with it (the report quotes it).


def test_a_decode_step_s_output_and_rows_come_back_as_sent():
    output = torch.arange(8.0).reshape(1, 1, 8)  # [batch, 1, hidden]
    rows = {"wq": 1, "wk": 2, "wv": 3}
    checked = only_result({"op": "decode_step"}, {"ok": {"output": output, "rows": rows}})["ok"]
    assert checked["output"] is output and checked["rows"] == rows


def test_a_generation_comes_back_as_sent_with_its_calls_counted():
    op = _generation_op()
    calls = {"append": 4, "attend": 3, "attend_chunk": 2, "reorder": 1, "truncate": 0}
    reply = _generation_reply(op, calls=calls)
    checked = replies._ok(reply, op, "r")
    assert checked["sequences"] is reply["sequences"] and checked["logits"] is reply["logits"]
    assert checked["calls"] == reply["calls"]
    mismatch = {"mismatch": "logits differ", "calls": reply["calls"]}
    assert replies._ok(mismatch, op, "r") == mismatch


def test_an_exception_comes_back_as_raised_each_text_in_its_place():
    raised = {
        "type": "KeyError",
        "lineage": ["KeyError", "LookupError"],
        "message": "no such key",
        "traceback": "File ..., line 3",
    }
    assert only_result({"op": "new"}, {"raised": raised})["raised"] == raised


def test_a_traceback_of_max_tail_characters_is_kept_whole_one_more_loses_its_first():
    for first in ("", "F"):
        raised = {"type": "E", "lineage": ["E"], "message": "m"}
        raised["traceback"] = first + "t" * replies.MAX_TAIL
        kept = only_result({"op": "new"}, {"raised": raised})["raised"]["traceback"]
        assert kept == "t" * replies.MAX_TAIL, first


@pytest.mark.parametrize("nested", [lambda t: [1, t], lambda t: {"k": t}], ids=["list", "dict"])
def test_a_tensor_anywhere_in_a_tests_reply_is_malformed(nested):
    counts = {"exit_code": 0, "passed": 1, "failed": 0, "errors": 0, "tests_sha256": "ab"}
    with pytest.raises(replies.MalformedReply, match="the tests' extra is a tensor"):
        replies.tests_reply({**counts, "extra": nested(torch.zeros(1))})


def test_a_result_of_both_or_neither_a_value_and_an_exception_says_which():
    raised = {"type": "E", "lineage": ["E"], "message": "m", "traceback": ""}
    with pytest.raises(replies.MalformedReply, match="holds both of a value and an exception"):
        only_result({"op": "new"}, {"ok": None, "raised": raised})
    with pytest.raises(replies.MalformedReply, match="holds neither of a value and an exception"):
        only_result({"op": "new"}, {})


def test_an_int_field_s_message_names_a_non_int_and_says_an_int_is_out_of_range():
    with pytest.raises(replies.MalformedReply, match="capacity is str 'x'"):
        only_result({"op": "append"}, raised_on({"capacity": "x"}))
    with pytest.raises(replies.MalformedReply, match="capacity is out of range"):
        only_result({"op": "append"}, raised_on({"capacity": 2**63}))
