"""graders.judge.candidate on its own: the plans a grader builds, and what `Candidate.run` makes of
each kind of worker reply, against a stub worker (no process starts).

A plan's builders each add one operation (its None fields left out) and return its index; a
measured plan gets 3x the time limit (docs/decisions.md). `run` turns a timeout into
CandidateTimeout, a malformed reply, a crash or an unsendable result into CandidateError (a
reached resource limit named first), NotImplementedError into NotAttempted, an exception where
none may be raised into CandidateError naming the call, its cache's state and the candidate's
line, and one on a `may_raise` operation into `Raised`. `tensor` lets a plain tensor through and
fails anything else, saying what arrived. The tests assert the verdict and the kind of message
(the facts it names), not its wording; hostile cache states (lengths that are not ints, an empty
list, a capacity that is not an int) must give a readable message, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from graders.judge import candidate as candidate_module
from graders.judge.candidate import Candidate

from graders.judge.workers import Reply
from graders.shared.plans import (
    CandidateError,
    CandidateTimeout,
    Fail,
    NotAttempted,
    Plan,
    Raised,
    Results,
    Tell,
    tensor,
)
from graders.shared.untrusted import MAX_QUOTE
from graders.worker.limits import Limits
from graders.worker.wire import Opaque

TIMEOUT = 10.0
CANDIDATE_FRAME = 'File "/tmp/work/kv_cache.py", line 41, in append'


@dataclass
class StubWorker:
    """Answers every request with `reply`, and keeps what it was sent: (requests, timeout)."""

    reply: Reply
    limits: Limits = Limits()
    sent: list = field(default_factory=list)

    interrupted: bool = False

    def run(self, requests: list[dict], timeout: float) -> list[Reply]:
        self.sent.append((requests, timeout))
        return [self.reply]

    def interrupt(self) -> None:
        self.interrupted = True


def done(*results: dict) -> Reply:
    return Reply("done", {"results": list(results)})


def raised(
    type_: str = "ValueError",
    message: str = "bad shape",
    *,
    cache=None,
    traceback: str = "",
    lineage=("ValueError", "Exception"),
) -> dict:
    """One operation's result when the candidate's code raised (as graders.judge.replies passes it)."""
    return {
        "raised": {
            "type": type_,
            "message": message,
            "lineage": list(lineage),
            "traceback": traceback,
            "cache": cache,
        }
    }


def run(plan: Plan, reply: Reply, limits: Limits = Limits()) -> Results:
    return Candidate(StubWorker(reply, limits), TIMEOUT).run(plan)


def key(positions: int) -> torch.Tensor:
    return torch.zeros(1, 2, positions, 4)  # [batch, heads, positions, head_dim]


def append_plan(**fields) -> Plan:
    plan = Plan()
    plan.append("c", key(fields.pop("positions", 4)), None, **fields)
    return plan


def error_of(plan: Plan, result: dict, limits: Limits = Limits()) -> CandidateError:
    with pytest.raises(CandidateError) as caught:
        run(plan, done(result), limits)
    return caught.value


def error_of_reply(reply: Reply, limits: Limits = Limits()) -> CandidateError:
    with pytest.raises(CandidateError) as caught:
        run(append_plan(), reply, limits)
    return caught.value


# Plan


def test_each_builder_adds_one_operation_without_its_none_fields_and_returns_its_index():
    plan = Plan()
    x = torch.ones(2, 3)  # [batch, features]
    counts = torch.tensor([1, 2])  # [batch]
    weights = {"wq": x}
    indices = [
        plan.new(),
        plan.new("d", capacity=8),
        plan.append("c", x, x, counts, may_raise=True, return_inputs=True, measure=True),
        plan.append("c", x, x),
        plan.attend("c", x, may_raise=True, return_inputs=True),
        plan.attend("c", x),
        plan.state(),
        plan.state("d", ("keys",)),
        plan.reset(),
        plan.reset("d"),
        plan.release("c", 1),
        plan.layer("l", weights, 4, 2, 8, 10000.0),
        plan.decode_step("l", "c", x, counts),
        plan.decode_step("l", "c", x),
        plan.inventory("c", {"p": 1}),
        plan.paged_new("p", 16, 4, dtype="bfloat16", heads=2),
        plan.paged_new("q", 16),
        plan.call("p", "allocate", 3, may_raise=True),
        plan.call("p", "free"),
        plan.get("p", "num_free_blocks"),
        plan.reorder("c", [1, 0]),
        plan.fork("c", "e"),
        plan.beam_search(weights, [1, 2], 3, 4, 4, 2, 8, 10000.0),
    ]
    assert indices == list(range(len(plan.ops)))
    assert plan.ops == [
        {"op": "new", "cache": "c"},
        {"op": "new", "cache": "d", "capacity": 8},
        {
            "op": "append",
            "cache": "c",
            "key": x,
            "value": x,
            "counts": counts,
            "may_raise": True,
            "return_inputs": True,
            "measure": True,
        },
        {"op": "append", "cache": "c", "key": x, "value": x},
        {"op": "attend", "cache": "c", "query": x, "may_raise": True, "return_inputs": True},
        {"op": "attend", "cache": "c", "query": x},
        {"op": "state", "cache": "c", "names": ["keys", "values", "lengths", "capacity"]},
        {"op": "state", "cache": "d", "names": ["keys"]},
        {"op": "reset", "cache": "c"},
        {"op": "reset", "cache": "d"},
        {"op": "release", "cache": "c", "index": 1},
        {
            "op": "layer",
            "layer": "l",
            "weights": weights,
            "n_heads": 4,
            "n_kv_heads": 2,
            "head_dim": 8,
            "rope_base": 10000.0,
        },
        {"op": "decode_step", "layer": "l", "cache": "c", "x": x, "counts": counts},
        {"op": "decode_step", "layer": "l", "cache": "c", "x": x},
        {"op": "inventory", "cache": "c", "probes": {"p": 1}},
        {
            "op": "paged_new",
            "obj": "p",
            "args": [16, 4],
            "kwargs": {"heads": 2, "dtype": "bfloat16"},
        },
        {"op": "paged_new", "obj": "q", "args": [16], "kwargs": {}},
        {"op": "call", "obj": "p", "method": "allocate", "args": [3], "may_raise": True},
        {"op": "call", "obj": "p", "method": "free", "args": []},
        {"op": "get", "obj": "p", "attr": "num_free_blocks"},
        {"op": "reorder", "cache": "c", "beam_idx": [1, 0]},
        {"op": "fork", "cache": "c", "into": "e"},
        {
            "op": "beam_search",
            "weights": weights,
            "prompt": [1, 2],
            "beams": 3,
            "steps": 4,
            "n_heads": 4,
            "n_kv_heads": 2,
            "head_dim": 8,
            "rope_base": 10000.0,
        },
    ]


def test_a_plan_is_measured_only_when_an_append_is():
    plan = Plan()
    plan.new()
    plan.append("c", key(1), key(1), measure=False)
    assert plan.measured is False
    plan.append("c", key(1), key(1), measure=True)
    assert plan.measured is True


def test_the_worker_is_sent_the_plan_with_the_time_limit_and_a_measured_plan_three_times_it():
    plain, measured = append_plan(), append_plan(measure=True)
    for plan, timeout in ((plain, TIMEOUT), (measured, 3 * TIMEOUT)):
        worker = StubWorker(done({"ok": None}))
        Candidate(worker, TIMEOUT).run(plan)
        assert worker.sent == [([{"plan": {"ops": plan.ops}}], timeout)]


# Candidate.run: replies that answer


def test_results_hold_each_operation_value_its_inputs_after_and_raised_where_it_may_raise():
    plan = Plan()
    plan.new()
    plan.attend("c", key(1), return_inputs=True)
    plan.append("c", key(1), key(1), may_raise=True)
    inputs = {"query": key(1)}
    results = run(
        plan,
        done(
            {"ok": None},
            {"ok": 7, "inputs_after": inputs},
            raised(
                "IndexError", "out of range", lineage=("IndexError", "LookupError", "Exception")
            ),
        ),
    )
    assert results[0] is None and results[1] == 7
    assert results.inputs_after(1) is inputs and results.inputs_after(0) is None
    assert results[2] == Raised(
        "IndexError", "out of range", ("IndexError", "LookupError", "Exception")
    )
    assert results[2].is_a("LookupError") and not results[2].is_a("ValueError")


def test_a_reply_with_fewer_results_than_operations_is_an_error():
    plan = Plan()
    plan.new()
    plan.reset()
    with pytest.raises(CandidateError, match="stopped early"):
        run(plan, done({"ok": None}))


# Candidate.run: replies that do not


def test_a_timeout_is_a_timeout_naming_what_happened():
    with pytest.raises(CandidateTimeout, match="used 10 s of CPU time"):
        run(append_plan(), Reply("timeout", detail="used 10 s of CPU time without finishing"))


def test_a_malformed_reply_is_an_error_saying_only_how_it_was_malformed():
    detail = "sent a reply to another batch (SIGXCPU)"
    error = error_of_reply(Reply("crashed", detail=detail, malformed=True))
    assert str(error) == detail


def test_a_crash_is_an_error_led_by_the_limit_it_reached_if_any():
    limits = Limits(cpu_seconds=30)
    reached = error_of_reply(Reply("crashed", detail="was killed by SIGXCPU"), limits)
    assert str(reached).startswith("CPU time limit of 30 s reached: ")
    assert str(reached).endswith("was killed by SIGXCPU")
    plain = error_of_reply(Reply("crashed", detail="was killed by SIGSEGV"), limits)
    assert "limit" not in str(plain) and str(plain).endswith("was killed by SIGSEGV")


def test_a_result_that_cannot_be_sent_back_is_an_error_quoting_why():
    error = error_of_reply(Reply("done", {"error": "  TypeError: cannot pickle 'generator'\n"}))
    assert "cannot be sent back" in str(error)
    assert str(error).endswith(": TypeError: cannot pickle 'generator'")
    memory = error_of_reply(Reply("done", {"error": "MemoryError"}), Limits(memory=1 << 30))
    assert str(memory).startswith("memory limit of 1 GiB reached: ")


# Candidate.run: what the candidate's code raised


def test_not_implemented_is_not_attempted_naming_the_operation_or_method():
    with pytest.raises(NotAttempted, match="`append`"):
        run(append_plan(), done(raised("NotImplementedError", "")))
    plan = Plan()
    plan.call("p", "allocate", 3, may_raise=True)
    with pytest.raises(NotAttempted, match="`allocate`"):
        run(plan, done(raised("NotImplementedError", "")))


def test_a_missing_name_is_an_error_with_the_worker_message():
    error = error_of(append_plan(may_raise=True), raised("MissingName", "no class KVCache"))
    assert str(error) == "no class KVCache"


def test_a_reached_limit_is_an_error_even_where_the_operation_may_raise():
    error = error_of(
        append_plan(may_raise=True), raised("MemoryError", "out of memory"), Limits(memory=1 << 30)
    )
    assert str(error).startswith("memory limit of 1 GiB reached: ")
    assert "`append` raised MemoryError" in str(error)


def test_an_exception_where_none_may_be_raised_names_the_call_and_the_candidate_line():
    traceback = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "/opt/kata/graders/worker/ops.py", line 90, in run',
            '  File "/tmp/work/kv_cache.py", line 12, in append',
            "    self._grow()",
            f"  {CANDIDATE_FRAME}",
            '  File "/usr/lib/python3.11/site-packages/torch/_ops.py", line 5, in cat',
            '  File "/usr/local/lib/python3.11/copy.py", line 7, in copy',
            "ValueError: bad shape",
        ]
    )
    error = error_of(append_plan(), raised(traceback=traceback))
    assert str(error).startswith("`append` of 4 positions raised ValueError: bad shape")
    assert str(error).endswith(f" ({CANDIDATE_FRAME})")
    assert error.signature == ("ValueError", "bad shape", f" ({CANDIDATE_FRAME})")


def test_a_traceback_of_library_frames_only_names_no_line():
    traceback = '  File "/opt/kata/graders/worker/ops.py", line 90, in run\nValueError: x'
    error = error_of(append_plan(), raised(traceback=traceback))
    assert str(error).endswith("raised ValueError: bad shape")
    assert error.signature == ("ValueError", "bad shape", "")


def test_a_hostile_candidate_frame_is_quoted_clipped():
    frame = 'File "/tmp/' + "x" * 10_000 + '.py", line 1, in append'
    error = error_of(append_plan(), raised(traceback=frame))
    assert len(str(error)) < 2 * MAX_QUOTE


# The call's words: its size and its cache's state


def words(plan: Plan, cache) -> str:
    return str(error_of(plan, raised(cache=cache)))


def test_an_append_past_capacity_names_lengths_capacity_and_the_growth_the_contract_asks():
    message = words(append_plan(), {"lengths": [2047], "capacity": 2048})
    assert message.startswith("`append` of 4 positions at lengths [2047], capacity 2048 raised")
    assert "what append does when a row outgrows capacity 2048" in message


def test_an_append_that_fits_exactly_asks_no_growth():
    message = words(append_plan(), {"lengths": [2044, 10], "capacity": 2048})
    assert "at lengths [2044, 10], capacity 2048" in message
    assert "grow" not in message


def test_the_growth_counts_each_row_own_append_when_counts_are_given():
    past = append_plan(counts=torch.tensor([1, 3]))  # [batch]
    fits = append_plan(counts=torch.tensor([1, 2]))  # [batch]
    empty = append_plan(counts=torch.tensor([], dtype=torch.int64))  # [0]: the key's size counts
    cache = {"lengths": [2046, 2046], "capacity": 2048}
    assert "what append does when a row outgrows capacity 2048" in words(past, cache)
    assert "grow" not in words(fits, cache)
    assert "what append does when a row outgrows capacity 2048" in words(empty, cache)


def test_one_position_is_singular_and_a_decode_step_is_one():
    assert words(append_plan(positions=1), None).startswith("`append` of 1 position raised")
    plan = Plan()
    plan.decode_step("l", "c", torch.zeros(1, 8))  # [batch, d_model]
    assert words(plan, None).startswith("`decode_step` of 1 position raised")


def test_a_call_without_a_key_is_named_by_its_operation_or_method_alone():
    attend = Plan()
    attend.attend("c", key(1))
    assert words(attend, None).startswith("`attend` raised ValueError")
    call = Plan()
    call.call("p", "allocate", 3)
    assert words(call, {"lengths": [1], "capacity": 1}).startswith(
        "`allocate` at lengths [1], capacity 1 raised ValueError"
    )


def test_a_noncontiguous_key_counts_its_positions_and_a_key_of_other_rank_none():
    plan = Plan()
    plan.append("c", {"noncontiguous": key(3)}, None)
    assert words(plan, None).startswith("`append` of 3 positions raised")
    flat = Plan()
    flat.append("c", torch.zeros(2, 5, 4), None)  # [heads, positions, head_dim]: not 4-d
    message = words(flat, {"lengths": [4], "capacity": 4})
    assert message.startswith("`append` at lengths [4], capacity 4 raised")
    assert "grow" not in message


def test_more_than_eight_lengths_show_the_first_eight():
    eight = words(append_plan(), {"lengths": list(range(8))})
    assert "at lengths [0, 1, 2, 3, 4, 5, 6, 7] raised" in eight
    nine = words(append_plan(), {"lengths": list(range(10, 19))})
    assert "at lengths [10, 11, 12, 13, 14, 15, 16, 17, ...] raised" in nine


@pytest.mark.parametrize(
    "cache",
    [
        {"lengths": ["2047"], "capacity": "2048"},
        {"lengths": [], "capacity": "4"},
        {"lengths": [True], "capacity": 2048.0},
        {"lengths": (2047,), "capacity": True},
        ["lengths", "capacity"],
        None,
    ],
    ids=["strings", "empty", "bool-and-float", "tuple-and-bool", "not-a-dict", "none"],
)
def test_a_cache_state_that_is_not_a_list_of_ints_and_an_int_is_left_out(cache):
    message = words(append_plan(), cache)
    assert message.startswith("`append` of 4 positions raised ValueError: bad shape")
    assert "lengths" not in message and "capacity" not in message


def test_lengths_without_a_capacity_ask_no_growth():
    message = words(append_plan(), {"lengths": [2047]})
    assert "at lengths [2047] raised" in message and "grow" not in message
    message = words(append_plan(), {"capacity": 2})
    assert message.startswith("`append` of 4 positions, capacity 2 raised")
    assert "grow" not in message


# tensor


def test_tensor_lets_a_plain_tensor_through():
    value = torch.ones(2)
    assert tensor(value, "attend") is value


def test_tensor_fails_a_data_less_tensor_saying_its_dtype_shape_type_and_device():
    with pytest.raises(Fail) as meta:
        tensor(Opaque("float32", (2, 3), "meta", "torch.Tensor"), "`attend`")
    assert "float32 tensor [2, 3] on meta" in str(meta.value)
    assert "subclass" not in str(meta.value) and "plain torch.Tensor" in str(meta.value)
    with pytest.raises(Fail) as subclass:
        tensor(Opaque("float16", (4,), "cpu", "m.Sub"), "`attend`")
    assert "float16 tensor [4] of type m.Sub (a torch.Tensor subclass)" in str(subclass.value)
    assert "on cpu" not in str(subclass.value)


def test_tensor_fails_anything_else_quoting_it():
    with pytest.raises(Fail, match=r"`attend` is \[1, 2\], expected a torch.Tensor"):
        tensor([1, 2], "`attend`")


# The rest of the judge's view


def test_tells_are_kept_in_order():
    candidate = Candidate(StubWorker(done()), TIMEOUT)
    candidate.tell("a", True, "seen")
    candidate.tell("b", False, "not seen")
    assert candidate.tells == [Tell("a", True, "seen"), Tell("b", False, "not seen")]


def test_a_candidate_error_has_no_signature_unless_given_one():
    assert CandidateError("x").signature is None
    assert CandidateError("x", ("T", "m", "")).signature == ("T", "m", "")


def test_section_8s_operations_and_a_name_of_it_the_file_lacks_is_not_attempted():
    """attend_chunk, truncate and new(window=W) are operations of their own; the worker's
    NotWritten (a file without section 8) is L6+ not attempted, not an error."""
    plan = Plan()
    x, lengths = torch.ones(2, 2, 3, 4), torch.tensor([1, 0])
    assert [
        plan.new("w", window=4),
        plan.attend_chunk("w", x, may_raise=True),
        plan.truncate("w", lengths, may_raise=True),
        plan.truncate("w", lengths),
    ] == [0, 1, 2, 3]
    assert plan.ops == [
        {"op": "new", "cache": "w", "window": 4},
        {"op": "attend_chunk", "cache": "w", "query": x, "may_raise": True},
        {"op": "truncate", "cache": "w", "lengths": lengths, "may_raise": True},
        {"op": "truncate", "cache": "w", "lengths": lengths},
    ]
    with pytest.raises(NotAttempted, match="defines no `truncate`"):
        run(
            append_plan(may_raise=True),
            done(raised("NotWritten", "the file defines no `truncate` (contract section 8, L6+)")),
        )


# A limit named from an exception's message; the real-model item's two workers: the
# implementation beside transformers, and transformers alone (the reference)


def test_a_limit_read_from_the_message_is_named_and_the_exception_quoted_whole():
    result = raised("OSError", "[Errno 28] No space left on device")
    error = error_of(append_plan(may_raise=True), result)
    assert str(error).startswith("the private /tmp is full (")
    assert str(error).endswith("): `append` raised OSError: [Errno 28] No space left on device")


def test_a_plan_beside_the_model_runs_on_the_model_worker_and_a_reference_on_the_other():
    beside = StubWorker(done({"ok": 1}))
    alone = StubWorker(done({"ok": 2}, {"ok": 3}))
    candidate = Candidate(StubWorker(done({"ok": 0})), TIMEOUT, None, None, beside, alone)
    plan = Plan()
    plan.new("c")
    assert candidate.run(plan, beside_model=True).values == [1]
    assert candidate.reference(plan) == [2, 3]
    assert beside.sent == [([{"plan": {"ops": plan.ops}}], TIMEOUT)] and len(alone.sent) == 1
    assert alone.sent[0][1] == TIMEOUT


@pytest.mark.parametrize("given", [(True, True), (True, False), (False, True)], ids=str)
def test_abandoning_the_model_interrupts_its_two_workers_and_no_other(given):
    implementation, tests = StubWorker(done()), StubWorker(done())
    model, reference = (StubWorker(done()) if g else None for g in given)
    candidate = Candidate(implementation, TIMEOUT, None, tests, model, reference)
    candidate.abandon_model()
    assert [w.interrupted for w in (model, reference) if w is not None] == [True] * sum(given)
    assert not implementation.interrupted and not tests.interrupted


@pytest.mark.parametrize(
    "reply, words",
    [
        (Reply("crashed", detail="died"), "the reference worker failed: crashed died"),
        (Reply("timeout", detail="hung"), "the reference worker failed: timeout hung"),
        (Reply("done", {"error": "no pickle"}), "the reference worker failed: done no pickle"),
        (done(raised("KeyError", "'wq'")), "the reference worker raised KeyError: 'wq'"),
    ],
    ids=["crashed", "timeout", "unsendable", "raised"],
)
def test_what_goes_wrong_in_the_reference_worker_is_the_kata_s_fault(reply, words):
    candidate = Candidate(StubWorker(done()), TIMEOUT, None, None, StubWorker(done()), None)
    candidate.reference_worker = StubWorker(reply)
    with pytest.raises(RuntimeError) as caught:
        candidate.reference(Plan())
    assert str(caught.value) == words


@pytest.mark.parametrize("given", [False, True], ids=["neither-given", "only-one-given"])
def test_a_candidate_built_by_hand_makes_its_model_workers_once_as_companions(monkeypatch, given):
    made = []

    def model_workers(path, name, mode, sandbox, import_timeout):
        made.append((path, name, mode, sandbox.limits(), import_timeout))
        return StubWorker(done({"ok": "beside"})), StubWorker(done({"ok": "alone"}))

    monkeypatch.setattr(candidate_module.GradeWorkers, "model_workers", staticmethod(model_workers))

    @dataclass
    class Base(StubWorker):
        path: str = "/tmp/work/kv_cache.py"
        module: str = "kv_cache"
        isolation: str = "sandbox"
        import_timeout: float = 7.0
        companions: list = field(default_factory=list)

    limits = Limits(memory=1 << 30)
    base = Base(done({"ok": 0}), limits)
    half = StubWorker(done({"ok": "half"})) if given else None  # a pair is made together
    candidate = Candidate(base, TIMEOUT, model_worker=half)
    plan = Plan()
    plan.new("c")
    assert candidate.run(plan, beside_model=True).values == ["beside"]
    assert candidate.reference(plan) == ["alone"]
    assert made == [(Path(base.path), "kv_cache", "sandbox", limits, 7.0)]
    assert base.companions == [candidate.model_worker, candidate.reference_worker]
