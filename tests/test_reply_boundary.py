"""What a worker sends back is checked where it enters the judge (graders.judge.replies), and a worker's
request child cannot reach the judge's pipes.

The unit tests feed graders.judge.replies every kind of malformed reply and assert the verdict kind
(MalformedReply, or the Reply the worker makes of it), not its wording. The slow tests grade
each wire attack of tests/hostile/ (in bubblewrap where it runs, as `kata grade` would): the
item the attack answers is `error` with a malformed-reply message, or the attack has no effect;
the other items, whose calls the file answers correctly, pass; the exit code is 1 or 0, never 4.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
import torch

from graders.judge import replies
from tests.grading import grade
from graders.judge.isolation import Sandbox, bwrap_problem
from graders.judge.workers import Worker
from graders.shared.mutation import REFERENCE
from graders.shared.plans import Plan
from graders.shared.untrusted import MAX_QUOTE
from graders.worker import frames, wire

BATCH = "0123456789abcdef"
# Where a sandbox runs, the attacks are graded in it; else in the process fallback.
MODE = "require" if bwrap_problem() is None else "process"
ITEMS = {"append-time-dim", "attend-shape", "prefix-equivalence", "ragged-batch"}


def plan_with_every_operation() -> Plan:
    plan = Plan()
    plan.new("c")
    plan.append("c", torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    plan.attend("c", torch.zeros(1, 1, 1, 4), return_inputs=True)
    plan.state("c")
    plan.append("c", torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4), measure=True)
    plan.inventory("c", {"queries": torch.zeros(2, 4)})
    plan.decode_step("l", "c", torch.zeros(1, 1, 8))
    plan.beam_search(
        {},
        torch.zeros(3, dtype=torch.int64),
        beams=2,
        steps=4,
        n_heads=1,
        n_kv_heads=1,
        head_dim=4,
        rope_base=1e4,
    )
    plan.drive_scheduler(WORKLOAD, max_steps=8)
    plan.real_model(GENERATION)
    plan.real_model_reference(GENERATION)
    return plan


# The real-model item's generate: 1 row, a prompt of 2 tokens, 3 new (graders.worker.real_model).
GENERATION = {
    "model": {"config": {"vocab_size": 8}, "weights": {}},
    "input_ids": torch.ones(1, 2, dtype=torch.int64),
    "attention_mask": torch.ones(1, 2, dtype=torch.int64),
    "mode": "greedy",
    "attention": "model",
    "new_tokens": 3,
    "beams": 1,
}
GENERATED = {"sequences": torch.ones(1, 5, dtype=torch.int64), "logits": torch.zeros(3, 1, 8)}


# The batching track's drive_scheduler: one request of one token, producing one.
WORKLOAD = {
    "config": {
        "num_blocks": 4,
        "block_size": 2,
        "max_num_seqs": 1,
        "max_batched_tokens": 4,
        "prefix_caching": False,
    },
    "requests": [{"id": "a", "prompt": [1], "max_new_tokens": 1, "eos": None, "arrival": 0}],
    "oracle": {"a": [5]},
}


def good_results() -> list[dict]:
    """What the worker's ops.py returns for plan_with_every_operation, as it decodes."""
    return [
        {"ok": None},
        {"ok": None},
        {"ok": torch.zeros(1, 1, 1, 4), "inputs_after": {"query": torch.zeros(1, 1, 1, 4)}},
        {
            "ok": {
                "keys": torch.zeros(1, 1, 2, 4),
                "values": torch.zeros(1, 1, 2, 4),
                "lengths": torch.tensor([2]),
                "capacity": 2,
            }
        },
        {
            "ok": {
                "allocations": 1,
                "bytes": 64,
                "held": 64,
                "largest": [["float32", [1, 1, 4, 4], 1, 64]],
            }
        },
        {
            "ok": {
                "tensors": [{"path": "cache.k", "shape": [1, 1, 4, 4], "dtype": "float32"}],
                "held": {"queries": []},
            }
        },
        {"ok": {"output": torch.zeros(1, 1, 8), "rows": {"wq": 1, "wk": 1, "wv": 1}}},
        {
            "ok": {
                "tokens": torch.zeros(4, 2, dtype=torch.int64),
                "beam_idx": torch.zeros(4, 2, dtype=torch.int64),
                "scores": torch.zeros(4, 2),
            }
        },
        {
            "ok": {
                "steps": [
                    {
                        "at": 0,
                        "batch": [["a", 0, 1, [0]]],
                        "produced": {"a": 5},
                        "finished": ["a"],
                        "free_after_schedule": 3,
                        "free_after_update": 4,
                    }
                ],
                "adds": [{"id": "a", "at": 0}],
                "error": None,
                "stalled": False,
            }
        },
        {
            "ok": {
                **GENERATED,
                "calls": {
                    name: 1 for name in ("append", "attend", "attend_chunk", "reorder", "truncate")
                },
            }
        },
        {"ok": GENERATED},
    ]


def with_result(n: int, result) -> dict:
    results = good_results()
    results[n] = result
    return {"results": results}


def with_ok(n: int, ok) -> dict:
    return with_result(n, {"ok": ok})


OPS = plan_with_every_operation().ops


def test_a_well_formed_plan_reply_passes_unchanged():
    checked = replies.plan_reply({"results": good_results()}, OPS)
    assert len(checked["results"]) == len(OPS)
    assert checked["results"][3]["ok"]["capacity"] == 2
    assert torch.equal(checked["results"][2]["ok"], torch.zeros(1, 1, 1, 4))
    assert replies.plan_reply({"results": good_results()[:3]}, OPS)  # a plan that stopped early
    assert replies.plan_reply({"error": "cannot be sent"}, OPS) == {"error": "cannot be sent"}
    wide = {**good_results()[7]["ok"], "scores": torch.zeros(4, 2, dtype=torch.float64)}
    assert replies.plan_reply(with_ok(7, wide), OPS)  # a decode_step that returned float64


@pytest.mark.parametrize(
    "reply",
    [
        1,
        None,
        [],
        "results",
        {},
        {"results": 1},
        {"results": [None] * len(OPS)},
        {"error": 5},
        {"error": "x", "results": []},
        {"results": good_results() + [{"ok": None}]},
    ],
    ids=[
        "one",
        "none",
        "list",
        "string",
        "empty",
        "results-not-a-list",
        "result-not-a-dict",
        "error-not-text",
        "error-and-results",
        "more-results-than-operations",
    ],
)
def test_a_reply_of_the_wrong_shape_is_malformed(reply):
    with pytest.raises(replies.MalformedReply):
        replies.plan_reply(reply, OPS)


@pytest.mark.parametrize(
    "reply",
    [
        with_result(0, {}),
        with_result(0, {"ok": None, "raised": {}}),
        with_result(0, {"ok": None, "extra": 1}),
        with_result(1, {"ok": None, "inputs_after": {}}),
        with_result(0, {"raised": {"type": "ValueError", "message": "m", "traceback": ""}}),
        with_result(0, {"raised": {"type": 1, "lineage": [], "message": "m", "traceback": ""}}),
        with_result(0, {"raised": {"type": "E", "lineage": [1], "message": "m", "traceback": ""}}),
        with_ok(0, torch.zeros(2)),
        with_ok(1, 5),
        with_ok(3, torch.zeros(2, 3)),
        with_ok(3, wire.Opaque("float32", (2, 3), "meta", "torch.Tensor")),
        with_ok(3, {"keys": None}),
        with_ok(3, {**good_results()[3]["ok"], "secret": 1}),
        with_ok(4, None),
        with_ok(4, {"allocations": -1, "bytes": 0, "held": 0, "largest": []}),
        with_ok(4, {"allocations": True, "bytes": 0, "held": 0, "largest": []}),
        with_ok(4, {"allocations": 1, "bytes": 0, "held": 0, "largest": [["f", [1], 1, 1]] * 4}),
        with_ok(4, {"allocations": 1, "bytes": 0, "held": 0, "largest": [["f", [1.5], 1, 1]]}),
        with_ok(5, {"tensors": [{"path": 1, "shape": [1], "dtype": "f"}], "held": {"queries": []}}),
        with_ok(5, {"tensors": [], "held": {"keys": []}}),
        with_ok(5, {"tensors": [], "held": {"queries": [1]}}),
        with_ok(6, {"output": torch.zeros(1, 1, 8), "rows": {"wq": 1, "wk": 1}}),
        with_ok(6, {"output": torch.zeros(1, 1, 8), "rows": {"wq": 1.0, "wk": 1, "wv": 1}}),
        with_ok(6, torch.zeros(1, 1, 8)),
        with_ok(7, {**good_results()[7]["ok"], "tokens": torch.zeros(4, 2)}),
        with_ok(7, {**good_results()[7]["ok"], "scores": torch.zeros(4, 3)}),
        with_ok(7, {**good_results()[7]["ok"], "scores": torch.zeros(4, 2, dtype=torch.int64)}),
        with_ok(7, {**good_results()[7]["ok"], "beam_idx": [[0, 1]] * 4}),
        with_result(2, {"ok": None, "inputs_after": {"query": [1, 2]}}),
        with_result(2, {"ok": None, "inputs_after": {"key": torch.zeros(1)}}),
    ],
    ids=[
        "neither-ok-nor-raised",
        "both-ok-and-raised",
        "extra-key",
        "inputs-not-asked-for",
        "raised-lacks-lineage",
        "raised-type-not-text",
        "lineage-not-text",
        "a-value-where-nothing-returns",
        "a-number-for-an-append",
        "a-tensor-for-a-state",
        "a-data-less-tensor-for-a-state",
        "state-lacks-names",
        "state-extra-name",
        "measure-missing",
        "negative-count",
        "bool-count",
        "four-largest-groups",
        "fractional-shape",
        "inventory-path-not-text",
        "inventory-probe-not-asked",
        "inventory-path-a-number",
        "rows-lack-wv",
        "rows-a-float",
        "decode-step-a-tensor",
        "beam-tokens-float",
        "beam-scores-wrong-shape",
        "beam-scores-integers",
        "beam-idx-a-list",
        "input-back-as-a-list",
        "input-not-sent",
    ],
)
def test_a_result_that_breaks_its_operation_s_schema_is_malformed(reply):
    with pytest.raises(replies.MalformedReply):
        replies.plan_reply(reply, OPS)


def test_every_operation_the_worker_runs_has_a_schema_in_the_judge():
    from graders.worker.ops import _OPS

    built = {op["op"] for op in OPS}
    assert set(_OPS) <= replies.RETURNS_NOTHING | replies.RETURNS_CANDIDATE_VALUE | built


def test_candidate_text_comes_out_clipped():
    huge = "x" * 4_000_000
    raised = {
        "type": "E" * 10_000,
        "lineage": ["E" * 10_000, "Exception"],
        "message": huge,
        "traceback": huge,
    }
    reply = with_result(2, {"raised": raised})
    reply["results"][3]["ok"]["capacity"] = wire.Repr(huge)
    checked = replies.plan_reply(reply, OPS)["results"]
    assert len(checked[2]["raised"]["message"]) <= MAX_QUOTE
    assert len(checked[2]["raised"]["type"]) <= MAX_QUOTE
    assert all(len(name) <= MAX_QUOTE for name in checked[2]["raised"]["lineage"])
    assert isinstance(checked[3]["ok"]["capacity"], wire.Repr)
    assert len(checked[3]["ok"]["capacity"]) <= MAX_QUOTE
    assert len(replies.plan_reply({"error": huge}, OPS)["error"]) <= MAX_QUOTE
    error = replies.loaded({"status": "import-error", "error": huge})["error"]
    assert len(error) <= MAX_QUOTE


def status(**fields) -> dict:
    return {"status": "done", "index": 0, "batch": BATCH, **fields}


@pytest.mark.parametrize(
    "body",
    [
        1,
        {},
        status(status="finished"),
        status(index=1),
        status(batch="another"),
        {"status": "done", "index": 0},
        status(extra=1),
        status(status="crashed", how="x"),
        status(status="crashed", how=1, stderr=""),
        status(status="timeout", seconds="1", stderr=""),
        status(status="timeout", seconds=1, stderr="", wall=3),
        status(status="timeout", seconds=float("nan"), stderr=""),
        status(index=True),
    ],
    ids=[
        "not-a-dict",
        "empty",
        "unknown-status",
        "another-request",
        "another-batch",
        "no-batch",
        "extra-key",
        "crash-without-stderr",
        "crash-how-a-number",
        "seconds-as-text",
        "wall-without-cpu",
        "seconds-nan",
        "index-true",
    ],
)
def test_a_status_out_of_step_or_of_the_wrong_shape_is_malformed(body):
    with pytest.raises(replies.MalformedReply):
        replies.status(body, 0, BATCH)


def test_a_status_in_step_passes_and_its_texts_come_out_clipped():
    assert replies.status(status(), 0, BATCH) == {"status": "done"}
    crashed = replies.status(status(status="crashed", how="x", stderr="y" * 100_000), 0, BATCH)
    assert len(crashed["stderr"]) <= MAX_QUOTE
    timeout = status(status="timeout", seconds=2, stderr="", wall=6, cpu=0.5)
    assert replies.status(timeout, 0, BATCH)["wall"] == 6


@pytest.mark.parametrize(
    "body",
    [
        1,
        {"index": 0, "batch": BATCH},
        {"index": 1, "batch": BATCH, "reply": {}},
        {"index": 0, "batch": "stale", "reply": {}},
        {"index": 0, "batch": BATCH, "reply": {}, "x": 1},
    ],
    ids=["not-a-dict", "no-reply", "another-request", "an-earlier-batch", "extra-key"],
)
def test_a_result_frame_that_answers_another_request_is_malformed(body):
    with pytest.raises(replies.MalformedReply):
        replies.result(body, 0, BATCH)


@pytest.mark.parametrize(
    "check, body",
    [
        (replies.started, 1),
        (replies.started, {"status": "torch-ready", "x": 1}),
        (replies.started, {"status": "loaded"}),
        (replies.loaded, 1),
        (replies.loaded, {"status": "loaded", "error": "x"}),
        (replies.loaded, {"status": "import-error"}),
        (replies.loaded, {"status": "import-error", "error": 5}),
        (replies.loaded, {"status": "done"}),
    ],
    ids=[
        "start-not-a-dict",
        "start-extra-key",
        "start-not-torch-ready",
        "import-not-a-dict",
        "loaded-with-error",
        "error-without-text",
        "error-a-number",
        "unknown-status",
    ],
)
def test_a_start_or_import_frame_of_the_wrong_shape_is_malformed(check, body):
    with pytest.raises(replies.MalformedReply):
        check(body)


def test_a_tests_run_reply_is_checked_too():
    good = {
        "exit_code": 0,
        "passed": 3,
        "failed": 0,
        "errors": 0,
        "first_failure": None,
        "tests_sha256": "ab",
    }
    assert replies.tests_reply(good) == good
    for bad in (
        1,
        {**good, "exit_code": "0"},
        {**good, "passed": None},
        {**good, "first_failure": 3},
        {**good, "extra": torch.zeros(1)},
        {k: v for k, v in good.items() if k != "tests_sha256"},
    ):
        with pytest.raises(replies.MalformedReply):
            replies.tests_reply(bad)


def test_a_frame_too_deep_or_too_large_is_malformed_never_another_error():
    deep = b'{"tensors": [], "body": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(replies.MalformedReply):
        replies.decode(len(deep).to_bytes(8, "big") + deep)
    read_end, write_end = os.pipe()
    os.write(write_end, (32 << 20).to_bytes(8, "big") + b"{}" * 1000)
    try:
        with pytest.raises(replies.MalformedReply, match="more than"):
            replies.read(read_end, time.monotonic() + 5, frames.REPLIES)
    finally:
        os.close(read_end)
        os.close(write_end)


class FakeWorker(Worker):
    """A Worker whose stream from its process is a pipe the test writes."""

    def __init__(self):
        super().__init__("implementation")
        self._out, self.write_end = os.pipe()
        self._in = -1

    def send(self, *bodies) -> None:
        for body in bodies:
            os.write(self.write_end, wire.encode(body))


def test_a_reply_answers_its_own_request_or_the_worker_is_out_of_step():
    worker = FakeWorker()
    request = {"plan": {"ops": OPS}}
    deadline = time.monotonic() + 5
    worker.send(status(), {"index": 0, "batch": BATCH, "reply": {"results": good_results()}})
    assert worker._read_reply(0, BATCH, request, deadline).status == "done"
    # A forged second frame after a whole reply: read as the next status, which it is not.
    worker.send({"index": 0, "batch": BATCH, "reply": {"results": []}})
    with pytest.raises(replies.MalformedReply):
        worker._read_reply(1, BATCH, request, deadline)
    # A forged "done" for the next request ahead of the real reply: out of step.
    worker.send(status(index=1), status())
    with pytest.raises(replies.MalformedReply):
        worker._read_reply(0, BATCH, request, deadline)
    os.close(worker.write_end)
    os.close(worker._out)


def test_a_malformed_body_fails_its_request_and_keeps_the_stream_in_step():
    worker = FakeWorker()
    request = {"plan": {"ops": OPS}}
    deadline = time.monotonic() + 5
    worker.send(
        status(),
        {"index": 0, "batch": BATCH, "reply": 1},
        status(index=1),
        {"index": 1, "batch": BATCH, "reply": {"results": []}},
        status(index=2, status="malformed", how="a frame header of 9 GB"),
    )
    first = worker._read_reply(0, BATCH, request, deadline)
    assert first.malformed and first.status == "crashed" and "malformed" in first.detail
    assert worker._read_reply(1, BATCH, request, deadline).status == "done"
    assert worker._read_reply(2, BATCH, request, deadline).malformed
    os.close(worker.write_end)
    os.close(worker._out)


# --- the attacks, graded --------------------------------------------------------------------


def grade_attack(hostile_file, name: str, mode: str = MODE):
    """A grade of ITEMS of tests/hostile/NAME.py, whose attack is made once (a flag named by a
    fresh token in the worker's /tmp)."""
    path = hostile_file(name, TOKEN=f"kata-attack-{uuid.uuid4().hex}")
    return grade(path, only=ITEMS, sandbox=Sandbox(mode))


def outcome(result) -> dict:
    assert not result.grader_broke and result.exit_code() in (0, 1), result
    return {item.id: item for item in result.items}


def why(item) -> str:
    """The whole reason an item did not pass (a worker that could not run it says it there)."""
    return item.unavailable or item.message


def assert_only_the_attacked_item_fails(items: dict, attacked: str) -> None:
    """The attacked item is `error` with a malformed-reply message; every other item passes."""
    assert items[attacked].status == "error", items[attacked]
    assert "malformed" in items[attacked].message, items[attacked].message
    for item_id, item in items.items():
        if item_id != attacked:
            assert item.status == "pass", item


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            "require",
            marks=pytest.mark.skipif(bwrap_problem() is not None, reason=f"{bwrap_problem()}"),
        ),
        "process",
    ],
)
def test_writing_the_judge_s_pipe_has_no_effect(mode, hostile_file):
    result = grade_attack(hostile_file, "writes_the_judges_pipe", mode)
    items = outcome(result)
    assert all(item.status == "pass" for item in items.values()), items
    assert result.exit_code() == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, attacked",
    [
        ("replies_one", "attend-shape"),
        ("replies_without_ok", "attend-shape"),
        ("replies_a_tensor_for_a_state", "append-time-dim"),
        ("nests_200000_deep", "attend-shape"),
        ("forges_a_done_reply", "attend-shape"),
    ],
)
def test_a_malformed_reply_fails_the_item_it_answers_and_no_other(name, attacked, hostile_file):
    result = grade_attack(hostile_file, name)
    assert_only_the_attacked_item_fails(outcome(result), attacked)
    assert result.exit_code() == 1


@pytest.mark.slow
def test_a_forgery_from_the_import_puts_the_worker_out_of_step_and_shifts_no_reply(hostile_file):
    """The candidate's module-level code runs in the zygote, which holds the judge's pipes: what
    a thread started there writes is read as a status out of step. Its item is an error and the
    worker restarts; every item is judged on its own reply or not at all."""
    result = grade_attack(hostile_file, "writes_the_judges_pipe_from_its_import")
    items = outcome(result)
    errors = [item for item in items.values() if item.status != "pass"]
    assert errors and result.exit_code() == 1, items
    for item in errors:  # out of step; or, when a forgery came before the import's frame, not run
        assert item.status == "error" and "malformed" in why(item), item


JUDGE_PEAK = """
import resource, sys
from pathlib import Path
from tests.grading import grade
from graders.judge.isolation import Sandbox
result = grade(Path(sys.argv[1]), only={"attend-shape", "prefix-equivalence"},
               sandbox=Sandbox(sys.argv[2]))
print([item.status for item in result.items], result.exit_code())
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10)
"""


def judge_peak_bytes(path, mode: str) -> tuple[str, int]:
    """The statuses of a grade of `path` run in a process of its own, and that judge's peak RSS."""
    done = subprocess.run(
        [sys.executable, "-c", JUDGE_PEAK, str(path), mode],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    statuses, peak = done.stdout.strip().splitlines()[-2:]
    return statuses, int(peak)


@pytest.mark.slow
def test_a_32_mib_status_frame_fails_its_item_and_leaves_the_judge_s_memory_bounded(
    hostile_file, tmp_path
):
    result = grade_attack(hostile_file, "floods_a_status_frame")
    assert_only_the_attacked_item_fails(outcome(result), "attend-shape")
    attacked = hostile_file(
        "floods_a_status_frame", "attacked.py", TOKEN=f"kata-attack-{uuid.uuid4().hex}"
    )
    statuses, peak = judge_peak_bytes(attacked, MODE)
    assert statuses.startswith("['error', 'pass']"), statuses
    _, baseline = judge_peak_bytes(reference_copy(tmp_path), MODE)
    # Measured: 0.23 GiB for both (bwrap); parsed whole, the frame took the judge to 1.82 GiB.
    assert peak < baseline + (64 << 20), (peak >> 20, baseline >> 20)


def reference_copy(tmp_path):
    """The reference solution as a candidate's file: the baseline of a judge's memory."""
    path = tmp_path / "reference" / "kv_cache.py"
    path.parent.mkdir()
    path.write_text(REFERENCE.read_text())
    return path


def import_error_of(source: str, tmp_path) -> str:
    """What the worker tells the judge of importing `source` as a file."""
    from graders.worker.serve import import_error, import_file

    path = tmp_path / "kv_cache.py"
    path.write_text(source)
    try:
        import_file(path, f"kata_import_{uuid.uuid4().hex}")
    except BaseException as exc:  # noqa: BLE001 - whatever the file raises
        return import_error(exc, str(path))
    raise AssertionError("the file imported")


@pytest.mark.parametrize(
    "source, shows",
    [
        ("db_password = s3cr3t_value\nother_secret = 'hunter2'\n", "NameError"),
        ("db_password: s3cr3t value\nother_secret = 'hunter2'\n", "SyntaxError"),
        ("user = 'a'\n\tdb_password = 's3cr3t'\nother_secret = 'hunter2'\n", "IndentationError"),
        ("raise ValueError('line one\\nother_secret = hunter2')\n", "ValueError: line one"),
        ("e = ValueError('x')\ne.add_note('other_secret = hunter2')\nraise e\n", "ValueError: x"),
    ],
    ids=["password-file", "not-python", "indented", "multi-line-message", "note"],
)
def test_an_import_error_quotes_at_most_one_line_of_the_file(source, shows, tmp_path):
    error = import_error_of(source, tmp_path)
    assert shows in error
    assert "hunter2" not in error, error
    quoted = [line for line in error.splitlines() if line.startswith("    ")]
    assert len(quoted) <= 1, error


def test_an_import_error_of_megabytes_is_cut_in_the_worker(tmp_path):
    from graders.worker.wire import TEXT_CHARS

    error = import_error_of(f"raise ImportError('{'x' * 4_000_000}')\n", tmp_path)
    assert error.startswith("ImportError: x") and len(error) <= TEXT_CHARS + 20
