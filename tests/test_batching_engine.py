"""The batching track's judging engine (issue 34), without a candidate: the driver
(graders.worker.batching), the kata's model and paged runner with its ledger
(graders.batching.model), the replay's findings (graders.batching.replay) and the workloads.

Schedulers here are the file's own: `Tiny`, a small correct one (FCFS, chunked prefill,
recompute preemption of the most recently arrived), and `Scripted`, which returns batches
written by hand, so each rule is broken exactly once where a test says.
"""

from __future__ import annotations

import copy

import pytest
import torch

from graders.batching import model, replay, workloads
from graders.batching.reference import ReferenceScheduler, Request, Scheduled
from graders.judge.replies import drive_trace
from graders.worker.batching import drive


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The judge grades on one thread (graders.judge.grade); two fight on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Tiny:
    """A correct scheduler, as small as the contract allows (no prefix caching): decodes, then
    running prefills, then waiting requests in order, all chunked to the budget; when the
    blocks the running work needs are not free, the most recently arrived running sequence is
    preempted (recompute) and nothing starts that step."""

    def __init__(
        self, num_blocks, block_size, max_num_seqs, max_batched_tokens, *, prefix_caching=False
    ):
        self.bs, self.seqs_cap, self.budget = block_size, max_num_seqs, max_batched_tokens
        self.free = list(range(num_blocks))
        self.waiting, self.running, self.last = [], [], {}

    @property
    def num_free_blocks(self):
        return len(self.free)

    def has_work(self):
        return bool(self.waiting or self.running)

    def add(self, request):
        self.waiting.append({"r": request, "tokens": list(request.prompt), "done": 0, "table": []})

    def _need(self, seq, n):
        return max(0, -(-(seq["done"] + n) // self.bs) - len(seq["table"]))

    def schedule(self):
        preempted = False
        while True:
            plan, left = [], self.budget
            for seq in sorted(self.running, key=lambda s: len(s["tokens"]) - s["done"] != 1):
                n = min(len(seq["tokens"]) - seq["done"], left)
                if n:
                    plan.append((seq, n))
                    left -= n
            if sum(self._need(s, n) for s, n in plan) <= len(self.free):
                break
            victim = self.running.pop()
            self.free += victim["table"]
            victim["table"], victim["done"] = [], 0
            self.waiting.insert(0, victim)
            preempted = True
        for seq, n in plan:
            seq["table"] += [self.free.pop(0) for _ in range(self._need(seq, n))]
        while not preempted and self.waiting and len(self.running) < self.seqs_cap and left:
            seq = self.waiting[0]
            n = min(len(seq["tokens"]), left)
            if self._need(seq, n) > len(self.free):
                break
            self.running.append(self.waiting.pop(0))
            seq["table"] += [self.free.pop(0) for _ in range(self._need(seq, n))]
            plan.append((seq, n))
            left -= n
        batch = [Scheduled(seq["r"].id, seq["done"], n, tuple(seq["table"])) for seq, n in plan]
        self.last = {seq["r"].id: (seq, n) for seq, n in plan}
        return batch

    def update(self, new_tokens):
        finished = []
        for seq_id, (seq, n) in self.last.items():
            seq["done"] += n
            if seq_id in new_tokens:
                seq["tokens"].append(new_tokens[seq_id])
                out = len(seq["tokens"]) - len(seq["r"].prompt)
                if out == seq["r"].max_new_tokens or new_tokens[seq_id] == seq["r"].eos:
                    self.running.remove(seq)
                    self.free += seq["table"]
                    finished.append(seq_id)
        return finished


class Scripted:
    """Returns `script`'s batches in turn, each entry (seq_id, start, tokens, table); a request
    finishes on its max_new_tokens-th token or its eos, unless `finish[step]` says which do.
    num_free_blocks: the blocks outside the latest tables of unfinished requests, plus
    `off[(step, "schedule" | "update")]`."""

    def __init__(
        self,
        script,
        off,
        finish,
        num_blocks,
        block_size,
        max_num_seqs,
        max_batched_tokens,
        *,
        prefix_caching=False,
    ):
        self.script, self.off, self.finish, self.num_blocks = script, off, finish, num_blocks
        self.requests, self.outputs, self.tables = {}, {}, {}
        self.step, self.phase = 0, "schedule"

    @property
    def num_free_blocks(self):
        held = {b for table in self.tables.values() for b in table}
        return self.num_blocks - len(held) + self.off.get((self.step - 1, self.phase), 0)

    def has_work(self):
        return self.step < len(self.script)

    def add(self, request):
        self.requests[request.id], self.outputs[request.id] = request, 0

    def schedule(self):
        batch = [Scheduled(*entry) for entry in self.script[self.step]]
        for entry in batch:
            if entry.seq_id in self.requests:
                self.tables[entry.seq_id] = entry.block_table
        self.step, self.phase = self.step + 1, "schedule"
        return batch

    def update(self, new_tokens):
        finished = []
        for seq_id, token in new_tokens.items():
            self.outputs[seq_id] += 1
            request = self.requests[seq_id]
            if self.outputs[seq_id] == request.max_new_tokens or token == request.eos:
                finished.append(seq_id)
        finished = self.finish.get(self.step - 1, finished)
        for seq_id in finished:
            self.tables.pop(seq_id, None)
        self.phase = "update"
        return finished


def scripted(script, off=None, finish=None):
    return lambda **config: Scripted(script, off or {}, finish or {}, **config)


@pytest.fixture(scope="module")
def decoder():
    return model.Decoder()


def build(decoder, config, *specs, seed=1):
    """A workload of (id, prompt length or tokens, max_new_tokens, arrival) specs."""
    return workloads._build(
        decoder,
        torch.Generator().manual_seed(seed),
        {"num_blocks": 8, "block_size": 4, "max_num_seqs": 2, "max_batched_tokens": 8, **config},
        [{"id": i, "prompt": p, "max_new_tokens": m, "arrival": a} for i, p, m, a in specs],
    )


def run(workload, new_scheduler, max_steps=200):
    """The driver's trace, and its replay once checked as a worker's reply is."""
    trace = drive(new_scheduler, workload, max_steps, request_type=Request)
    return trace, replay.replay(workload, drive_trace(trace, workload, max_steps))


def fake(config=None, *requests):
    """A workload of made-up oracles (the driver never runs the model): (id, prompt length,
    max_new_tokens, arrival); each request produces 100, 101, ... ."""
    return {
        "config": {
            "num_blocks": 16,
            "block_size": 4,
            "max_num_seqs": 4,
            "max_batched_tokens": 16,
            "prefix_caching": False,
            **(config or {}),
        },
        "requests": [
            {"id": i, "prompt": list(range(p)), "max_new_tokens": m, "eos": None, "arrival": a}
            for i, p, m, a in requests
        ],
        "oracle": {i: list(range(100, 100 + m)) for i, _, m, _ in requests},
    }


# --- the driver ---


def test_the_driver_records_each_step_as_plain_data():
    load = fake({}, ("a", 5, 3, 0), ("b", 2, 1, 1))
    trace = drive(Tiny, load, 50, request_type=Request)
    assert trace["error"] is None and trace["stalled"] is False
    assert trace["adds"] == [{"id": "a", "at": 0}, {"id": "b", "at": 1}]
    first, second = trace["steps"][:2]
    assert first == {
        "at": 0,
        "batch": [["a", 0, 5, [0, 1]]],
        "free_after_schedule": 14,
        "produced": {"a": 100},
        "finished": [],
        "free_after_update": 14,
    }
    assert second["batch"] == [["a", 5, 1, [0, 1]], ["b", 0, 2, [2]]]
    assert second["produced"] == {"a": 101, "b": 100} and second["finished"] == ["b"]
    assert trace["steps"][-1]["finished"] == ["a"]
    produced = [t for step in trace["steps"] for s, t in step["produced"].items() if s == "a"]
    assert produced == [100, 101, 102]  # the oracle's tokens, in order


def test_idle_time_is_skipped_and_counts_no_step():
    load = fake({}, ("a", 2, 2, 0), ("b", 2, 2, 500))
    trace = drive(Tiny, load, 50, request_type=Request)
    assert [step["at"] for step in trace["steps"]] == [0, 1, 500, 501]
    assert trace["adds"][1] == {"id": "b", "at": 500} and not trace["stalled"]


def test_an_entry_off_the_known_tokens_or_of_a_request_not_yet_added_produces_nothing():
    load = fake({}, ("a", 3, 2, 0), ("b", 2, 1, 5))
    script = [[("a", 0, 2, (0,)), ("b", 0, 2, (1,))], [("a", 0, 3, (0,))]]
    trace = drive(scripted(script), load, 50, request_type=Request)
    assert [step["produced"] for step in trace["steps"]] == [{}, {"a": 100}]


class Raises(Tiny):
    def schedule(self):
        if getattr(self, "calls", 0) == 2:
            raise IndexError("pop from empty list")
        self.calls = getattr(self, "calls", 0) + 1
        return super().schedule()


def test_an_exception_ends_the_drive_and_is_recorded_with_its_step():
    trace = drive(Raises, fake({}, ("a", 2, 5, 0)), 50, request_type=Request)
    error = trace["error"]
    assert (error["call"], error["step"], error["kind"], error["type"], error["message"]) == (
        "schedule",
        2,
        "raised",
        "IndexError",
        "pop from empty list",
    )
    assert "Raises" not in error["message"] and "raise IndexError" in error["traceback"]
    assert len(trace["steps"]) == 2  # the step that raised is in the error alone


class Rejects(Tiny):
    def add(self, request):
        raise ValueError(f"no room for {request.id}")


class BadFree(Tiny):
    num_free_blocks = "plenty"


class IntIds(Tiny):
    def schedule(self):
        return [Scheduled(7, e.start, e.tokens, e.block_table) for e in super().schedule()]


class HugeTable(Tiny):
    def schedule(self):
        return [
            Scheduled(e.seq_id, e.start, e.tokens, tuple(range(10**6))) for e in super().schedule()
        ]


class HostileText(Tiny):
    def update(self, new_tokens):
        class Loud(Exception):
            def __str__(self):
                raise RuntimeError("no message for you")

        raise Loud()


class Dicts(Tiny):
    def schedule(self):
        return [vars(e) for e in super().schedule()]


class HugeStart(Tiny):
    def schedule(self):
        return [Scheduled(e.seq_id, 2**70, e.tokens, e.block_table) for e in super().schedule()]


class BoolFinished(Tiny):
    def update(self, new_tokens):
        return [True] if super().update(new_tokens) else []


@pytest.mark.parametrize(
    "scheduler, call, kind, words",
    [
        (Rejects, "add", "raised", "no room for a"),
        (BadFree, "num_free_blocks", "returned", "num_free_blocks is a str, not an int"),
        (IntIds, "schedule", "returned", "entry 0 has a seq_id of an int, not a str"),
        (
            HugeTable,
            "schedule",
            "returned",
            "block_table of 1000000 blocks, more than the pool's 16",
        ),
        (HostileText, "update", "raised", "could not be read"),
        (HugeStart, "schedule", "returned", "a start of an int out of int64's range"),
        (Dicts, "schedule", "returned", "entry 0 is a dict without a seq_id, not a Scheduled"),
        (BoolFinished, "update", "returned", "a finished id of a bool, not a str"),
    ],
)
def test_what_the_contract_does_not_allow_ends_the_drive_with_a_recorded_error(
    scheduler, call, kind, words
):
    trace = drive(scheduler, fake({}, ("a", 2, 1, 0)), 50, request_type=Request)
    assert trace["error"]["call"] == call and trace["error"]["kind"] == kind
    assert words in trace["error"]["message"]


def test_a_step_that_schedules_nothing_while_work_exists_stalls_the_drive():
    class Idle(Tiny):
        def schedule(self):
            return []

    trace = drive(Idle, fake({}, ("a", 2, 1, 0)), 50, request_type=Request)
    assert trace["stalled"] and len(trace["steps"]) == 1 and trace["error"] is None


def test_a_scheduler_that_never_ends_stops_at_max_steps():
    class Again(Tiny):
        def schedule(self):
            return [Scheduled("a", 0, 1, (0,))]

        def update(self, new_tokens):
            return []

    trace = drive(Again, fake({}, ("a", 2, 1, 0)), 30, request_type=Request)
    assert trace["stalled"] and len(trace["steps"]) == 30


# --- the model and the runner ---


def test_decoding_together_equals_decoding_alone(decoder):
    g = torch.Generator().manual_seed(5)
    requests = [
        (torch.randint(0, model.VOCAB, (n,), generator=g).tolist(), m, None)
        for n, m in ((1, 12), (9, 3), (40, 20), (4, 1))
    ]
    together = model.decode_together(decoder, requests)
    for (prompt, most, _), (tokens, margin) in zip(requests, together):
        assert tokens == model.greedy_alone(decoder, prompt, most) and len(tokens) == most
        assert margin > workloads.MIN_MARGIN
    alone = model.greedy_alone(decoder, requests[2][0], 20)
    eos = alone[5]
    assert model.greedy_alone(decoder, requests[2][0], 20, eos) == alone[: alone.index(eos) + 1]


def test_the_runner_reproduces_greedy_decoding_alone_through_chunks_and_preemption(decoder):
    load = build(
        decoder,
        {"num_blocks": 7, "max_num_seqs": 3, "max_batched_tokens": 6},
        ("a", 9, 12, 0),
        ("b", 5, 10, 0),
        ("c", 3, 8, 1),
    )
    trace, found = run(load, Tiny)
    assert found.first == {} and not trace["stalled"] and trace["error"] is None
    entries = [e for step in trace["steps"] for e in step["batch"]]
    assert any(e[0] == "a" and 0 < e[2] < 9 and e[1] == 0 for e in entries)  # a chunk
    assert found.prompt_tokens_computed > 17  # a preempted prompt computed again
    runner = model.PagedRunner(
        decoder, 7, 4, {r["id"]: r["prompt"] + load["oracle"][r["id"]] for r in load["requests"]}
    )
    produced = {r["id"]: [] for r in load["requests"]}
    for step in drive_trace(trace, load, 200).steps:
        tokens, misread = runner.step(list(step.batch))
        assert misread is None
        for seq_id in step.produced:
            produced[seq_id].append(tokens[seq_id])
    for r in load["requests"]:
        assert produced[r["id"]] == model.greedy_alone(decoder, r["prompt"], r["max_new_tokens"])


def test_a_table_pointing_at_a_freed_and_reused_block_is_a_misread(decoder):
    load = build(decoder, {}, ("a", 4, 2, 0), ("b", 4, 1, 1))
    script = [
        [("a", 0, 4, (0,))],
        [("b", 0, 4, (0,))],  # a left out: its block 0 reused by b
        [("a", 4, 1, (0, 1))],
    ]  # a comes back to block 0, not recomputing
    _, found = run(load, scripted(script))
    assert found.first["batch-equivalence"].message == (
        "step 2: request 'a', position 0 read block 0 slot 0, which holds position 0 of request 'b'"
    )


def test_a_table_pointing_at_another_requests_block_is_a_misread(decoder):
    load = build(decoder, {}, ("a", 8, 1, 0), ("b", 8, 1, 0))
    script = [[("a", 0, 8, (0, 1))], [("b", 4, 4, (1, 2))]]  # b's first block is a's second
    _, found = run(load, scripted(script))
    assert found.first["batch-equivalence"].message == (
        "step 1: request 'b', position 0 read block 1 slot 0, which holds position 4 of request 'a'"
    )
    assert "prefix-caching" not in found.first  # other tokens: not a prefix cache's mistake


def test_a_position_never_written_is_a_misread(decoder):
    load = build(decoder, {}, ("a", 6, 1, 0))
    _, found = run(load, scripted([[("a", 2, 4, (0, 1))]]))
    assert found.first["batch-equivalence"].message == (
        "step 0: request 'a', position 0 read block 0 slot 0, which was never written"
    )


def test_a_block_shared_across_different_prefixes_is_a_misread_and_a_prefix_finding(decoder):
    g = torch.Generator().manual_seed(9)
    p, q, r = (torch.randint(0, model.VOCAB, (4,), generator=g).tolist() for _ in range(3))
    load = build(
        decoder,
        {"prefix_caching": True, "max_batched_tokens": 16},
        ("a", p + q + [1], 1, 0),
        ("b", r + q + [2], 1, 1),
    )
    script = [
        [("a", 0, 9, (0, 1, 2))],
        [("b", 0, 4, (3,))],
        [("b", 8, 1, (3, 1, 4))],
    ]  # b's second block: a's, the same tokens after p
    _, found = run(load, scripted(script))
    expected = (
        "step 2: request 'b', position 4 read block 1 slot 0, which holds position 4 of request 'a'"
    )
    assert found.first["batch-equivalence"].message == expected
    assert found.first["prefix-caching"].message.startswith(expected + ": the same token")


# --- the budgets, each broken once ---

TWO = (("a", 3, 2, 0), ("b", 2, 2, 0))
CORRECT = [[("a", 0, 3, (0,)), ("b", 0, 2, (1,))], [("a", 3, 1, (0,)), ("b", 2, 1, (1,))]]


def test_the_correct_script_has_no_finding(decoder):
    _, found = run(build(decoder, {}, *TWO), scripted(CORRECT))
    assert found.first == {} and found.steps == 2 and found.tokens_computed == 7


@pytest.mark.parametrize(
    "config, step0, message",
    [
        ({"max_num_seqs": 1}, None, "step 0: 2 sequences scheduled, more than max_num_seqs (1)"),
        (
            {"max_batched_tokens": 4},
            None,
            "step 0: 5 tokens scheduled, more than max_batched_tokens (4)",
        ),
        (
            {},
            [("a", 0, 3, (8,)), ("b", 0, 2, (1,))],
            "step 0: the block table of 'a' holds block 8, not in range(num_blocks=8)",
        ),
        (
            {},
            [("a", 0, 3, (0,)), ("b", 0, 2, ())],
            "step 0: the block table of 'b', 0 blocks, covers 0 positions, fewer than start + tokens "
            "= 2",
        ),
        (
            {},
            [("a", 0, 3, (0,)), ("b", 0, 2, (0,))],
            "step 0: block 0 is written by 'a' and 'b' in one step",
        ),
        (
            {},
            [("a", 0, 3, (0,)), ("b", 0, 2, (1, 0))],
            "step 0: block 0, written by 'a' this step, is also in the table of 'b': a block is "
            "shared only from the step after the one that computed it",
        ),
        (
            {},
            [("a", 0, 4, (0,)), ("b", 0, 2, (1,))],
            "step 0: 'a' computes positions 0..3, past the 3 tokens known (start + tokens never "
            "exceeds them)",
        ),
        (
            {},
            [("a", 0, 3, (0,)), ("zz", 0, 2, (1,))],
            "step 0: it schedules 'zz', which is no request of the workload",
        ),
        (
            {},
            [("a", 0, 3, (0,)), ("a", 0, 3, (1,))],
            "step 0: request 'a' is scheduled twice in one step",
        ),
        (
            {},
            [("a", 0, 0, (0,)), ("b", 0, 2, (1,))],
            "step 0: 'a' is scheduled with start 0 and tokens 0",
        ),
    ],
)
def test_each_budget_broken_once_is_named_at_its_step(decoder, config, step0, message):
    script = [step0 or CORRECT[0], *CORRECT[1:]]
    _, found = run(build(decoder, config, *TWO), scripted(script))
    assert found.first["budgets"].message == message


def test_a_request_scheduled_before_its_arrival_or_after_it_finished_breaks_the_budgets(decoder):
    load = build(decoder, {}, ("a", 3, 1, 0), ("b", 2, 1, 5))
    _, early = run(load, scripted([[("a", 0, 3, (0,)), ("b", 0, 2, (1,))]]))
    assert early.first["budgets"].message == "step 0: it schedules 'b', which has not arrived"
    _, late = run(load, scripted([[("a", 0, 3, (0,))], [("a", 3, 1, (0,))]]))
    assert late.first["budgets"].message == "step 1: it schedules 'a', which has finished"


def test_more_running_than_max_num_seqs_breaks_the_budgets(decoder):
    load = build(decoder, {}, *TWO, ("c", 2, 1, 0))
    script = [CORRECT[0], [("a", 3, 1, (0,)), ("c", 0, 2, (2,))], [("b", 2, 1, (1,))]]
    _, found = run(load, scripted(script))
    assert found.first["budgets"].message == (
        "step 1: 3 sequences running, more than max_num_seqs (2)"
    )


def test_num_free_blocks_off_by_one_is_named_at_its_step(decoder):
    off = {(1, "update"): -1}
    _, found = run(build(decoder, {}, *TWO), scripted(CORRECT, off))
    assert found.first["block-accounting"].message == (
        "step 1: num_free_blocks after update() is 7; the blocks in the running sequences' "
        "tables leave 8 of 8 free"
    )
    assert set(found.first) == {"block-accounting"}


# --- the other rules ---


def test_update_returning_a_request_too_early_or_too_late_or_unknown_is_named(decoder):
    load = build(decoder, {}, *TWO)
    _, early = run(load, scripted(CORRECT, finish={0: ["a"]}))
    assert early.first["batch-equivalence"].message == (
        "step 0: update() returned 'a' finished after 1 of the 2 tokens it produces alone"
    )
    _, late = run(load, scripted(CORRECT, finish={1: ["b"]}))
    assert late.first["batch-equivalence"].message == (
        "step 1: request 'a' produced its max_new_tokens (2) but update() did not return it "
        "finished"
    )
    assert late.first["block-accounting"].message == (  # a's block: the scheduler holds it
        "at the end: num_free_blocks is 7 of 8 once every request is done: every block is free "
        "at the end"
    )
    _, unknown = run(load, scripted(CORRECT, finish={1: ["a", "zz"]}))
    assert unknown.first["batch-equivalence"].message == (
        "step 1: update() returned 'zz' finished, which is no running request"
    )


THREE = (("a", 3, 3, 0), ("b", 2, 3, 0), ("c", 2, 3, 0))
ALL_START = [("a", 0, 3, (0,)), ("b", 0, 2, (1,)), ("c", 0, 2, (2,))]


def test_preempting_other_than_the_most_recently_arrived_is_named(decoder):
    load = build(decoder, {"max_num_seqs": 3, "max_batched_tokens": 16}, *THREE)
    script = [
        ALL_START,
        [("b", 2, 1, (1,)), ("c", 2, 1, (2,))],  # a, the oldest, left out
        [("b", 3, 1, (1,)), ("c", 3, 1, (2,))],
        [("a", 0, 4, (0, 3))],  # a recomputes: it was preempted
        [("a", 4, 1, (0, 3))],
    ]
    _, found = run(load, scripted(script))
    assert found.first["preemption"].message == (
        "step 1: request 'a' was preempted while 'b', which arrived later, kept running: the "
        "victim is the most recently arrived running sequence"
    )


def test_a_request_starting_in_a_step_that_preempted_is_named(decoder):
    load = build(decoder, {"max_num_seqs": 3, "max_batched_tokens": 16}, *THREE, ("d", 2, 1, 1))
    script = [
        ALL_START,
        [("a", 3, 1, (0,)), ("b", 2, 1, (1,)), ("d", 0, 2, (3,))],  # c preempted
        [("a", 4, 1, (0, 4)), ("b", 3, 1, (1,))],
        [("c", 0, 3, (2,))],
        [("c", 3, 1, (2,))],
    ]
    _, found = run(load, scripted(script))
    assert found.first["preemption"].message == (
        "step 1: request 'd' started in a step that preempted 'c': no waiting request starts "
        "in a step that preempted"
    )


def test_a_running_decode_left_out_for_a_prefill_is_named(decoder):
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 2, 0), ("b", 6, 1, 1))
    script = [
        [("a", 0, 3, (0,))],
        [("b", 0, 6, (1, 2))],  # a's decode waits, though it is running
        [("a", 3, 1, (0,))],
    ]
    _, found = run(load, scripted(script))
    assert found.first["chunked-prefill"].message == (
        "step 1: running request 'a' was ready to decode but not scheduled, while a prefill "
        "was: every running decode runs every step, before any prefill"
    )


def test_a_running_prefill_left_out_while_a_new_request_starts_is_named(decoder):
    load = build(decoder, {}, ("a", 12, 1, 0), ("b", 3, 1, 1))
    script = [
        [("a", 0, 8, (0, 1))],
        [("b", 0, 3, (2,))],  # a, half prefilled, waits while b starts
        [("a", 8, 4, (0, 1, 3))],
    ]  # and goes on where it stopped: no preemption
    _, found = run(load, scripted(script))
    assert found.first["chunked-prefill"].message == (
        "step 1: running request 'a' had 4 tokens left to prefill but was not scheduled, while "
        "'b' started: running prefills continue before any waiting request starts"
    )
    assert found.passed("preemption") and found.passed("batch-equivalence")


def test_a_head_of_the_queue_left_waiting_with_room_to_start_is_named(decoder):
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 3, 0), ("b", 2, 1, 0))
    script = [[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], [("a", 4, 1, (0, 1)), ("b", 0, 2, (2,))]]
    _, found = run(load, scripted(script))
    assert found.first["fcfs"].message == (
        "step 0: request 'b', the head of the waiting queue, did not start though 1 sequence "
        "slots, 13 tokens and 7 free blocks were left"
    )


def test_a_request_started_before_an_earlier_one_still_waiting_is_named(decoder):
    load = build(decoder, {"max_num_seqs": 1}, ("a", 3, 1, 0), ("b", 2, 1, 0))
    _, found = run(load, scripted([[("b", 0, 2, (1,))], [("a", 0, 3, (0,))]]))
    assert found.first["fcfs"].message == (
        "step 0: request 'b' started while 'a', ahead of it in the waiting queue, was still waiting"
    )


def test_a_stall_is_named_and_leaves_outputs_incomplete(decoder):
    load = build(decoder, {"max_batched_tokens": 4}, ("a", 3, 2, 0), ("long", 9, 1, 0))
    _, found = run(load, scripted([[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], []]))
    assert found.stalled
    assert found.first["preemption"].message == (
        "step 2: schedule() returned nothing while has_work() was true: the scheduler stalls"
    )
    assert found.first["chunked-prefill"].message == (
        "step 2: the prompt of request 'long', 9 tokens, longer than max_batched_tokens (4), "
        "never started: it is computed in chunks over several steps"
    )
    assert found.first["batch-equivalence"].message == (
        "at the end: request 'long' produced 0 of the 1 tokens it produces alone when the "
        "scheduler stalled"
    )


CACHED = [
    [("b", 0, 2, (2,)), ("a", 0, 8, (0, 1))],
    [("b", 2, 1, (2,))],  # a left out: preempted, or waiting with its blocks
    [("a", 8, 1, (0, 1, 3))],  # back at 8: its two full blocks were cached
    [("a", 9, 1, (0, 1, 3))],
]


def test_a_comeback_on_cached_blocks_is_read_by_the_free_count(decoder):
    load = build(
        decoder, {"prefix_caching": True, "max_batched_tokens": 16}, ("b", 2, 2, 0), ("a", 8, 3, 0)
    )
    released = {(1, "schedule"): 2, (1, "update"): 2}  # the scheduler let a's blocks go
    _, found = run(load, scripted(CACHED, off=released))
    assert found.first == {}
    _, held = run(load, scripted(CACHED))  # it kept them: a's decode waited for b's prefill
    assert set(held.first) == {"chunked-prefill"}


# --- the workloads, and the kata's reference scheduler on them ---


def test_the_public_workloads_are_fixed_and_every_oracle_is_a_decoding_alone(decoder):
    public = workloads.public()
    assert [kind for kind, _ in public] == [
        "staggered",
        "mixed",
        "preemption",
        "long-prompt",
        "shared-prefix",
    ]
    assert public == workloads.public()
    kind, load = public[0]
    for r in load["requests"][:3]:
        assert load["oracle"][r["id"]] == model.greedy_alone(
            decoder, r["prompt"], r["max_new_tokens"], r["eos"]
        )
    assert any(
        r["eos"] is not None and len(load["oracle"][r["id"]]) < r["max_new_tokens"]
        for r in load["requests"]
    )


@pytest.mark.parametrize("draw", ["public", pytest.param("hidden", marks=pytest.mark.slow)])
def test_the_reference_scheduler_breaks_no_rule_and_batching_beats_static(draw):
    drawn = (
        workloads.public()
        if draw == "public"
        else [(kind, load) for kind, _, load in workloads.hidden(20261202)]
    )
    for kind, load in drawn:
        _, found = run(load, ReferenceScheduler, workloads.max_steps(load))
        assert found.first == {}, (kind, found.first)
        static = drive(
            lambda **c: ReferenceScheduler(**c, static=True),
            load,
            workloads.max_steps(load),
            request_type=Request,
        )
        assert found.steps < len(static["steps"]), kind
        if kind == "mixed":
            assert found.steps <= 0.7 * len(static["steps"])
        if kind == "shared-prefix":
            assert found.prompt_tokens_computed == workloads.unshared_prompt_tokens(load)
        if kind == "preemption":
            prompts = sum(len(r["prompt"]) for r in load["requests"])
            assert found.prompt_tokens_computed > prompts  # some recomputed


def test_a_trace_is_replayed_alike_twice():
    kind, load = workloads.public()[0]
    trace = drive_trace(
        drive(Tiny, load, workloads.max_steps(load), request_type=Request),
        load,
        workloads.max_steps(load),
    )
    first = replay.replay(load, copy.deepcopy(trace))
    assert replay.replay(load, trace) == first


@pytest.mark.slow
@pytest.mark.parametrize("seed", [101, 202, 303])
def test_every_hidden_draw_keeps_its_kinds_property(seed):
    """Whatever the seed: the preemption kind preempts, the mixed kind leaves static batching
    0.7x behind, the long prompt is longer than the budget, the prefix cache saves what can be
    saved; and a draw is its seed's alone."""
    drawn = workloads.hidden(seed)
    assert drawn == workloads.hidden(seed) and drawn != workloads.hidden(seed + 1)
    for kind, _, load in drawn:
        _, found = run(load, ReferenceScheduler, workloads.max_steps(load))
        static = drive(
            lambda **c: ReferenceScheduler(**c, static=True),
            load,
            workloads.max_steps(load),
            request_type=Request,
        )
        prompts = sum(len(r["prompt"]) for r in load["requests"])
        if kind == "preemption":
            assert found.preemptions > 0 and found.prompt_tokens_computed > prompts
        if kind == "mixed":
            assert found.steps <= 0.7 * len(static["steps"])
        if kind == "long-prompt":
            assert (
                max(len(r["prompt"]) for r in load["requests"])
                > 2 * load["config"]["max_batched_tokens"]
            )
        if kind == "shared-prefix":
            assert found.prompt_tokens_computed == workloads.unshared_prompt_tokens(load) < prompts


def test_a_restart_in_the_step_that_left_its_blocks_is_a_preemption_finding(decoder):
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 3, 0))
    script = [[("a", 0, 3, (0,))], [("a", 0, 4, (1,))], [("a", 4, 1, (1, 2))]]
    _, found = run(load, scripted(script))
    assert found.first["preemption"].message == (
        "step 1: request 'a' was preempted and restarted in the same step: no waiting request "
        "starts in a step that preempted"
    )


# --- what a finding holds besides its message: the rule, the kind (the likely mistake the
# report names is read from it), the step and the request, each in its place; the counts ---


def test_a_finding_holds_its_rule_kind_step_and_request_each_in_its_place(decoder):
    load = build(decoder, {"max_num_seqs": 3, "max_batched_tokens": 16}, *THREE, ("d", 2, 1, 1))
    script = [
        ALL_START,
        [("a", 3, 1, (0,)), ("b", 2, 1, (1,)), ("d", 0, 2, (3,))],  # c preempted
        [("a", 4, 1, (0, 4)), ("b", 3, 1, (1,))],
        [("c", 0, 3, (2,))],
        [("c", 3, 1, (2,))],
    ]
    _, found = run(load, scripted(script))
    finding = found.first["preemption"]
    assert (finding.rule, finding.kind, finding.step, finding.seq_id) == (
        "preemption",
        "start-in-preempting-step",
        1,
        "d",
    )
    assert found.preemptions == 1


def test_a_trace_that_preempts_no_one_counts_no_preemption(decoder):
    _, found = run(build(decoder, {}, *TWO), scripted(CORRECT))
    assert found.preemptions == 0


@pytest.mark.parametrize(
    "config, step0, kind",
    [
        ({"max_num_seqs": 1}, None, "seqs-by-one"),
        ({"max_batched_tokens": 4}, None, "tokens-by-one"),
        ({"max_batched_tokens": 3}, None, "tokens"),
        (
            {"max_num_seqs": 1, "max_batched_tokens": 16},
            [("a", 0, 3, (0,)), ("b", 0, 2, (1,)), ("c", 0, 2, (2,))],
            "seqs",
        ),
    ],
)
def test_a_budget_passed_by_one_is_told_from_one_passed_by_more(decoder, config, step0, kind):
    script = [step0 or CORRECT[0], *CORRECT[1:]]
    _, found = run(build(decoder, config, *TWO, ("c", 2, 1, 5)), scripted(script))
    assert found.first["budgets"].kind == kind


@pytest.mark.parametrize(
    "off, kind",
    [
        (-1, "free-count-low-by-one"),
        (1, "free-count-high-by-one"),
        (-2, "free-count-low"),
        (2, "free-count-high"),
    ],
)
def test_a_free_count_off_is_told_low_or_high_by_one_or_more(decoder, off, kind):
    _, found = run(build(decoder, {}, *TWO), scripted(CORRECT, {(0, "update"): off}))
    assert found.first["block-accounting"].kind == kind


def test_a_stall_on_an_empty_schedule_is_told_from_one_at_max_steps(decoder):
    load = build(decoder, {"max_batched_tokens": 4}, ("a", 3, 2, 0), ("long", 9, 1, 0))
    _, found = run(load, scripted([[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], []]))
    assert found.first["preemption"].kind == "stall-empty"


def test_a_request_id_in_a_message_is_quoted_whole_up_to_40_characters():
    assert replay.name("q" * 40) == "'" + "q" * 40 + "'"
    assert all(len(replay.name("q" * length)) <= 42 for length in (41, 100))  # quotes added


def test_without_prefix_caching_a_block_of_the_same_tokens_is_a_plain_misread(decoder):
    g = torch.Generator().manual_seed(9)
    p, q, r = (torch.randint(0, model.VOCAB, (4,), generator=g).tolist() for _ in range(3))
    load = build(
        decoder, {"max_batched_tokens": 16}, ("a", p + q + [1], 1, 0), ("b", r + q + [2], 1, 1)
    )
    script = [[("a", 0, 9, (0, 1, 2))], [("b", 0, 4, (3,))], [("b", 8, 1, (3, 1, 4))]]
    _, found = run(load, scripted(script))
    assert found.first["batch-equivalence"].kind == "misread"
    assert "prefix-caching" not in found.first


def test_an_entry_s_own_problem_is_named_by_its_kind(decoder):
    script = [[("a", 0, 3, (0,)), ("a", 0, 3, (1,))], *CORRECT[1:]]
    _, found = run(build(decoder, {}, *TWO), scripted(script))
    assert found.first["budgets"].kind == "twice"


def test_a_block_written_twice_is_found_in_every_block_an_entry_writes(decoder):
    # a's last block holds only its position 4, which b writes too
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 5, 1, 0), ("b", 1, 1, 0))
    _, found = run(load, scripted([[("a", 0, 5, (0, 1)), ("b", 0, 1, (1,))]]))
    assert found.first["budgets"].message == "step 0: block 1 is written by 'a' and 'b' in one step"
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 2, 0), ("b", 2, 2, 0))
    script = [CORRECT[0], [("a", 3, 1, (0,)), ("b", 2, 1, (0,))]]  # decodes: starts past 0
    _, found = run(load, scripted(script))
    assert found.first["budgets"].message == "step 1: block 0 is written by 'a' and 'b' in one step"


def test_the_prompt_tokens_computed_are_counted_for_each_request(decoder):
    _, found = run(build(decoder, {}, *TWO), scripted(CORRECT))
    assert found.prompt_tokens == {"a": 3, "b": 2} and found.prompt_tokens_computed == 5


THREE_DECODES = (("a", 2, 2, 0), ("b", 2, 2, 0), ("c", 2, 2, 0))
ALL_PREFILL = [("a", 0, 2, (0,)), ("b", 0, 2, (1,)), ("c", 0, 2, (2,))]


@pytest.mark.parametrize(
    "config, found_one",
    [
        ({"max_num_seqs": 3, "max_batched_tokens": 16}, True),  # a slot and tokens left
        ({"max_num_seqs": 2, "max_batched_tokens": 16}, False),  # every slot taken
        ({"max_num_seqs": 3, "max_batched_tokens": 2}, False),  # every token taken
    ],
    ids=["room", "no-slot", "no-token"],
)
def test_a_decode_left_out_with_room_and_no_prefill_is_named_only_with_room(
    decoder, config, found_one
):
    load = build(decoder, config, *THREE_DECODES)
    script = [ALL_PREFILL, [("a", 2, 1, (0,)), ("b", 2, 1, (1,))]]  # c's decode left out
    _, found = run(load, scripted(script))
    finding = found.first.get("chunked-prefill")
    if not found_one:
        assert finding is None
    else:
        assert (finding.kind, finding.seq_id) == ("decode-left-out", "c")
        assert finding.message.startswith("step 1: running request 'c' was ready to decode")
        assert "though the budgets had room" in finding.message


def test_a_prefill_with_two_tokens_left_left_out_while_a_new_request_starts_is_named(decoder):
    load = build(decoder, {}, ("a", 10, 1, 0), ("b", 3, 1, 1))
    script = [[("a", 0, 8, (0, 1))], [("b", 0, 3, (2,))], [("a", 8, 2, (0, 1, 3))]]
    _, found = run(load, scripted(script))
    assert found.first["chunked-prefill"].message.startswith(
        "step 1: running request 'a' had 2 tokens left to prefill"
    )


def test_a_request_finished_late_at_its_eos_is_said_to_have_produced_its_eos(decoder):
    load = workloads._build(
        decoder,
        torch.Generator().manual_seed(1),
        {"num_blocks": 8, "block_size": 4, "max_num_seqs": 2, "max_batched_tokens": 8},
        [{"id": "a", "prompt": 3, "max_new_tokens": 4, "arrival": 0, "eos_at": 1}],
    )
    (request,) = load["requests"]
    assert len(load["oracle"]["a"]) == 2 and request["eos"] == load["oracle"]["a"][-1]
    script = [[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], [("a", 4, 1, (0, 1))]]
    _, found = run(load, scripted(script, finish={1: []}))
    assert found.first["batch-equivalence"].message == (
        f"step 1: request 'a' produced its eos ({request['eos']}) but update() did not return "
        "it finished"
    )


def test_a_misread_of_a_request_never_preempted_is_no_preemption_finding(decoder):
    load = build(decoder, {}, ("a", 4, 2, 0), ("b", 4, 1, 1))
    script = [[("a", 0, 4, (0,))], [("b", 0, 4, (0,))], [("a", 4, 1, (0, 1))]]
    _, found = run(load, scripted(script))
    assert found.first["batch-equivalence"].kind == "misread"
    assert found.passed("preemption") and found.preemptions == 0


def test_a_stall_leaves_the_requests_short_of_their_tokens_unfinished(decoder):
    load = build(decoder, {"max_batched_tokens": 4}, ("a", 3, 2, 0), ("long", 9, 1, 0))
    _, found = run(load, scripted([[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], []]))
    assert found.unfinished == ["long"]


@pytest.mark.parametrize(
    "off, kept_out", [(-6, True), (-7, False)], ids=["blocks-for-it", "none-by-its-count"]
)
def test_the_head_is_kept_out_only_when_the_scheduler_s_own_count_has_its_blocks(
    decoder, off, kept_out
):
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 3, 0), ("b", 2, 1, 0))
    script = [[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], [("a", 4, 1, (0, 1)), ("b", 0, 2, (2,))]]
    off = {(0, "schedule"): off, (1, "schedule"): off}  # b needs one block
    _, found = run(load, scripted(script, off))
    assert found.passed("fcfs") is not kept_out


def test_the_head_waiting_while_every_slot_is_held_by_running_requests_is_no_finding(decoder):
    load = build(
        decoder, {"max_batched_tokens": 16}, ("a", 3, 2, 0), ("b", 2, 2, 0), ("c", 2, 1, 0)
    )
    script = [
        CORRECT[0],
        [("a", 3, 1, (0,))],  # b's decode waits, holding its slot: c cannot start
        [("b", 2, 1, (1,)), ("c", 0, 2, (2,))],
    ]
    _, found = run(load, scripted(script))
    assert found.passed("fcfs")


STALLED = [[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], []]  # a done, then nothing scheduled


@pytest.mark.parametrize(
    "off, named", [(-7, True), (-8, False)], ids=["a-block-for-a-chunk", "none-a-leak"]
)
def test_a_long_prompt_never_started_is_named_only_where_the_last_count_has_room_for_a_chunk(
    decoder, off, named
):
    load = build(decoder, {"max_batched_tokens": 4}, ("a", 3, 2, 0), ("long", 9, 1, 0))
    _, found = run(load, scripted(STALLED, {(2, "update"): off}))  # a chunk needs one block
    finding = found.first.get("chunked-prefill")
    assert (finding is not None and finding.kind == "long-prompt-never-started") is named


@pytest.mark.parametrize(
    "waiting",
    [(("c", 3, 1, 0), ("long", 9, 1, 0)), (("even", 4, 1, 0),)],
    ids=["long-behind-the-head", "prompt-of-the-budget"],
)
def test_a_stall_is_no_long_prompt_finding_unless_the_head_s_prompt_passes_the_budget(
    decoder, waiting
):
    load = build(decoder, {"max_batched_tokens": 4}, ("a", 3, 2, 0), *waiting)
    _, found = run(load, scripted(STALLED))
    assert found.stalled and "chunked-prefill" not in found.first


@pytest.mark.parametrize("released, preempted", [(0, 0), (1, 1)], ids=["kept", "released"])
def test_a_request_left_out_for_good_is_preempted_only_when_the_free_count_says_released(
    decoder, released, preempted
):
    load = build(
        decoder,
        {"max_batched_tokens": 16, "max_num_seqs": 3},
        ("a", 3, 2, 0),
        ("b", 2, 3, 0),
        ("c", 2, 1, 1),
    )
    # a never comes back; c starts in the step that left it out, taking a block of its own
    script = [CORRECT[0], [("b", 2, 1, (1,)), ("c", 0, 2, (2,))], [("b", 3, 1, (1,))]]
    off = {(n, call): released for n in (1, 2) for call in ("schedule", "update")}  # a's block
    _, found = run(load, scripted(script, off))
    assert found.preemptions == preempted


def test_a_comeback_before_the_positions_a_decode_computed_is_a_preemption(decoder):
    load = build(decoder, {"max_batched_tokens": 16}, ("a", 3, 3, 0))
    script = [[("a", 0, 3, (0,))], [("a", 3, 1, (0,))], [("a", 3, 2, (1, 2))]]  # 4 computed
    _, found = run(load, scripted(script))
    assert found.preemptions == 1 and found.first["preemption"].step == 2


def test_a_block_out_of_range_in_a_table_is_held_by_no_one(decoder):
    script = [[("a", 0, 3, (8,)), ("b", 0, 2, (1,))], *CORRECT[1:]]
    _, found = run(build(decoder, {}, *TWO), scripted(script))
    assert found.first["budgets"].kind == "block-range"
    assert found.first["block-accounting"].message.endswith("tables leave 7 of 8 free")


def test_a_token_other_than_decoding_alone_s_without_a_misread_is_named(decoder, monkeypatch):
    class Off(model.PagedRunner):
        """The kata's runner, its token for 'b' one off: what a numerically different batch
        would compute without reading a wrong block."""

        def step(self, entries):
            tokens, misread = super().step(entries)
            return {k: v + 1 if k == "b" else v for k, v in tokens.items()}, misread

    load = build(decoder, {}, *TWO)
    monkeypatch.setattr(replay, "PagedRunner", Off)
    _, found = run(load, scripted(CORRECT))
    finding = found.first["batch-equivalence"]
    assert (finding.rule, finding.kind, finding.step, finding.seq_id) == (
        "batch-equivalence",
        "token",
        0,
        "b",
    )
    token = load["oracle"]["b"][0]
    assert finding.message == (
        f"step 0: request 'b' produced token {token + 1} at position 2, where decoding it alone "
        f"produces {token}"
    )


def test_a_decode_left_out_while_a_running_prefill_continues_is_left_out_for_a_prefill(decoder):
    load = build(decoder, {}, ("a", 3, 2, 0), ("b", 7, 1, 0))
    script = [
        [("a", 0, 3, (0,)), ("b", 0, 5, (1, 2))],
        [("b", 5, 2, (1, 2))],  # b's last two prompt tokens; a's decode waits
        [("a", 3, 1, (0,))],
    ]
    _, found = run(load, scripted(script))
    finding = found.first["chunked-prefill"]
    assert (finding.kind, finding.step, finding.seq_id) == ("decode-left-out-for-prefill", 1, "a")


def test_a_start_that_broke_a_budget_computed_nothing(decoder):
    load = build(decoder, {}, ("a", 2, 1, 0), ("b", 3, 1, 1))
    script = [
        [("a", 0, 1, (8,))],  # a starts on a block out of range: nothing computed
        [("b", 0, 3, (1,))],  # a, both its prompt tokens still to compute, waits for b
        [("a", 1, 1, (0,))],
    ]
    _, found = run(load, scripted(script))
    assert found.first["budgets"].kind == "block-range"
    finding = found.first["chunked-prefill"]
    assert (finding.kind, finding.seq_id) == ("prefill-left-out-for-new", "a")
    assert "had 2 tokens left to prefill" in finding.message


def test_a_misread_after_a_restart_is_a_preemption_finding_too(decoder):
    load = build(decoder, {"max_batched_tokens": 16}, ("b", 4, 4, 0), ("a", 4, 3, 0))
    script = [
        [("b", 0, 4, (1,)), ("a", 0, 4, (0,))],
        [("b", 4, 1, (1, 2))],  # a, the most recently arrived, left out: preempted
        [("b", 5, 1, (1, 2)), ("a", 0, 5, (3, 4))],  # a recomputes
        [("b", 6, 1, (1, 2)), ("a", 5, 1, (1, 4))],  # then reads b's block
    ]
    _, found = run(load, scripted(script))
    assert found.preemptions == 1
    finding = found.first["preemption"]
    assert (finding.rule, finding.kind, finding.step, finding.seq_id) == (
        "preemption",
        "misread-after-restart",
        3,
        "a",
    )


def test_a_step_of_max_num_seqs_entries_keeps_the_head_waiting_fairly_whatever_they_are(decoder):
    load = build(decoder, {}, ("a", 3, 2, 0), ("b", 2, 1, 0))
    script = [
        [("a", 0, 3, (0,)), ("zz", 0, 1, (1,))],  # two entries, one of no request: no slot left
        [("a", 3, 1, (0,)), ("b", 0, 2, (1,))],
    ]
    _, found = run(load, scripted(script))
    assert found.first["budgets"].kind == "unknown" and found.passed("fcfs")


def test_a_restart_that_broke_a_budget_computed_nothing_of_its_new_life(decoder):
    config = {"max_batched_tokens": 16, "max_num_seqs": 3}
    load = build(decoder, config, ("b", 4, 5, 0), ("a", 4, 3, 0), ("c", 2, 1, 3))
    script = [
        [("b", 0, 4, (1,)), ("a", 0, 4, (0,))],  # a: 4 prompt tokens, then one output
        [("b", 4, 1, (1, 2))],  # a preempted
        [("b", 5, 1, (1, 2)), ("a", 0, 1, (8,))],  # a restarts on a block out of range
        [("b", 6, 1, (1, 2)), ("c", 0, 2, (3,))],  # c starts while a waits: 5 tokens to go
        [("b", 7, 1, (1, 2)), ("a", 1, 4, (0, 4))],
    ]
    _, found = run(load, scripted(script))
    assert found.preemptions == 1 and found.first["budgets"].kind == "block-range"
    finding = found.first["chunked-prefill"]
    assert (finding.kind, finding.step, finding.seq_id) == ("prefill-left-out-for-new", 3, "a")
    assert "had 5 tokens left to prefill" in finding.message
