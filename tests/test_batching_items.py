"""The batching track's items (graders/batching/items), the worker's drive_scheduler operation
and its reply schema (graders.judge.replies).

Quick tests run the items in-process: `InProcess` is a candidate whose plans run through the
worker's own ops.execute and the judge's reply check, without a worker process. Each wrong
scheduler of tests/wrong/batching.py fails exactly the items it names, the solution, the
reference and the one-queue design pass all eight. Slow tests grade through real workers: the
solution and the starter, and the hostile schedulers of tests/hostile/.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from graders.batching import grading, reference, workloads
from graders.judge import replies
from tests.grading import grade
from graders.shared import hidden_cases
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted, Results
from graders.worker import ops
from graders.worker.batching import drive
from tests.seeds import SUITE_SEED
from tests.test_replies_trace import plain
from tests.wrong.batching import SCHEDULERS

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "scheduler.py"
ONE_QUEUE = ROOT / "tests" / "implementations" / "batching" / "one_queue.py"
STARTER = ROOT / "starter" / "scheduler.py"
ITEMS = (
    "batch_equivalence",
    "budgets",
    "iteration_level",
    "preemption",
    "fcfs",
    "block_accounting",
    "chunked_prefill",
    "prefix_caching",
)
MODULES = {name: importlib.import_module(f"graders.batching.items.{name}") for name in ITEMS}
REFERENCE = SimpleNamespace(Request=reference.Request, Scheduler=reference.ReferenceScheduler)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """The judge grades on one thread (graders.judge.grade); two fight on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load(path: Path, source: str | None = None, name: str | None = None):
    """The module at `path` (or `source`), in sys.modules (dataclasses look it up there)."""
    spec = importlib.util.spec_from_loader(f"_items_{name or path.stem}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(
        compile(source if source is not None else path.read_text(), str(path), "exec"),
        module.__dict__,
    )
    return module


class InProcess:
    """A candidate whose plans run in this process: the worker's ops.execute on `module`, then
    the judge's reply check, as a worker's reply would be."""

    def __init__(self, module, fails: Exception | None = None):
        self.module, self.fails, self.plans = module, fails, 0

    def run(self, plan):
        self.plans += 1
        if self.fails is not None:
            raise self.fails
        reply = replies.plan_reply(
            {"results": ops.execute(self.module, {"ops": plan.ops})}, plan.ops
        )
        return Results(values=[result["ok"] for result in reply["results"]])


def verdicts(candidate, hidden: int | None = None) -> dict[str, str]:
    """item id -> "pass" or the exception's class name and message; the hidden items of the
    run seed `hidden` when it is given."""
    found = {}
    for module in MODULES.values():
        try:
            if hidden is not None:
                with hidden_cases.run_seed(hidden):
                    module.grade_hidden(candidate)
            else:
                module.grade(candidate)
            found[module.ITEM] = "pass"
        except (Fail, NotAttempted, CandidateError, CandidateTimeout) as exc:
            found[module.ITEM] = f"{type(exc).__name__}: {exc}"
    return found


# --- the items, in-process ---


@pytest.mark.parametrize("name", ["reference", "solution", "one_queue"])
def test_correct_schedulers_pass_every_item_with_one_plan_a_grade(name):
    module = {
        "reference": lambda: REFERENCE,
        "solution": lambda: load(SOLUTION),
        "one_queue": lambda: load(ONE_QUEUE),
    }[name]()
    candidate = InProcess(module)
    assert verdicts(candidate) == dict.fromkeys((m.ITEM for m in MODULES.values()), "pass")
    assert candidate.plans == 1  # eight items, one drive of the five workloads


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_correct_schedulers_pass_every_hidden_item(seed):
    for module in (REFERENCE, load(SOLUTION), load(ONE_QUEUE)):
        candidate = InProcess(module)
        assert verdicts(candidate, hidden=seed) == dict.fromkeys(
            (m.ITEM for m in MODULES.values()), "pass"
        )
        assert candidate.plans == 1


@pytest.mark.parametrize("wrong", SCHEDULERS, ids=lambda w: w.name)
def test_each_wrong_scheduler_fails_exactly_its_items(wrong):
    found = verdicts(InProcess(load(SOLUTION, wrong.mutant.source(), wrong.name)))
    failed = {item for item, verdict in found.items() if verdict != "pass"}
    assert failed == set(wrong.fails), found
    assert all(verdict.startswith("Fail: ") for item, verdict in found.items() if item in failed)


def test_every_hidden_grader_catches_a_wrong_scheduler_and_none_fails_unrelated_items():
    """At the suite's seed: each wrong scheduler fails some of its items and no other (its
    other items may pass on a draw that does not meet its mistake), and together they fail
    every batching item's hidden cases."""
    caught = set()
    for wrong in SCHEDULERS:
        found = verdicts(
            InProcess(load(SOLUTION, wrong.mutant.source(), wrong.name)), hidden=SUITE_SEED
        )
        failed = {item for item, verdict in found.items() if verdict != "pass"}
        assert failed and failed <= set(wrong.fails), (wrong.name, found)
        caught |= failed
    assert caught == {module.ITEM for module in MODULES.values()}


def test_the_untouched_starter_is_not_attempted_everywhere():
    found = verdicts(InProcess(load(STARTER)))
    assert set(found.values()) == {"NotAttempted: `add` still raises NotImplementedError"}


def test_a_scheduler_without_num_free_blocks_is_graded_on_the_rest():
    solution = load(SOLUTION, name="no_free_count")

    class NoCount(solution.Scheduler):
        @property
        def num_free_blocks(self):
            raise NotImplementedError

    found = verdicts(InProcess(SimpleNamespace(Request=solution.Request, Scheduler=NoCount)))
    assert found.pop("block-accounting") == (
        "NotAttempted: `num_free_blocks` still raises NotImplementedError"
    )
    assert set(found.values()) == {"pass"}


def test_an_exception_of_the_scheduler_is_an_error_naming_the_call_step_and_line():
    solution = load(SOLUTION, name="raises")

    class Raises(solution.Scheduler):
        def update(self, new_tokens):
            if len(new_tokens) > 3:
                raise IndexError("list index out of range")
            return super().update(new_tokens)

    found = verdicts(InProcess(SimpleNamespace(Request=solution.Request, Scheduler=Raises)))
    message = found["budgets"]
    assert message.startswith("CandidateError: the staggered workload, step ")
    assert "`update` raised IndexError: list index out of range (File " in message
    assert "raise IndexError" not in message and set(found.values()) == {message}


def test_what_stopped_the_worker_is_kept_for_every_item_and_asked_once():
    candidate = InProcess(REFERENCE, fails=CandidateTimeout("the implementation hung"))
    found = verdicts(candidate)
    assert set(found.values()) == {"CandidateTimeout: the implementation hung"}
    assert candidate.plans == 1


def test_a_returned_value_outside_the_contract_fails_every_item():
    solution = load(SOLUTION, name="returns_ints")

    class IntTables(solution.Scheduler):
        def schedule(self):
            return [
                solution.Scheduled(e.seq_id, e.start, e.tokens, [float(b) for b in e.block_table])
                for e in super().schedule()
            ]

    found = verdicts(InProcess(SimpleNamespace(Request=solution.Request, Scheduler=IntTables)))
    assert set(found.values()) == {
        "Fail: the staggered workload, step 0: schedule()'s entry 0 has a block_table holding "
        "a float, not only ints"
    }


def test_iteration_level_prints_the_three_figures_of_the_mixed_workload():
    with pytest.raises(Fail) as failed:
        MODULES["iteration_level"].grade(
            InProcess(
                load(
                    SOLUTION,
                    [w for w in SCHEDULERS if w.name == "static-batching"][0].mutant.source(),
                    "static",
                )
            )
        )
    assert str(failed.value).startswith(
        "the staggered workload: 79 steps, more than 1.1x the "
        "reference scheduler's 45 (static batching: 79)"
    )
    message = MODULES["iteration_level"].grade(InProcess(REFERENCE))
    assert message.startswith(
        "the mixed workload: 91 steps, the reference scheduler 91, static "
        "batching 160 (0.57x static)"
    )


def test_prefix_caching_names_a_cache_dropped_when_its_last_holder_finishes():
    solution = load(SOLUTION, name="forgets")

    class Forgets(solution.Scheduler):
        """Drops every cached block nobody holds after each step."""

        def update(self, new_tokens):
            finished = super().update(new_tokens)
            pool = self.pool
            for block in pool.evictable:
                del pool.by_hash[pool.hash_of.pop(block)]
                pool.plain.append(block)
            pool.evictable.clear()
            return finished

    with pytest.raises(Fail) as failed:
        MODULES["prefix_caching"].grade(
            InProcess(SimpleNamespace(Request=solution.Request, Scheduler=Forgets))
        )
    assert str(failed.value) == (
        "the shared-prefix workload: 131 prompt tokens computed, the reference scheduler 107 "
        "(107 of the 203 are unshared); request 'late' computed 29 where the reference computes "
        "5: it started when nothing else was running, and the blocks it begins with were cached, "
        "held by no one. Likely mistake: what becomes of a cached block when its last holder "
        "finishes"
    )


# --- the reply schema ---


def traced(load_=None, scheduler=REFERENCE, max_steps=200):
    load_ = load_ or workloads.public()[0][1]
    trace = drive(scheduler.Scheduler, load_, max_steps, request_type=scheduler.Request)
    return load_, [{"op": "drive_scheduler", "workload": load_, "max_steps": max_steps}], trace


def check(ops_, trace):
    return replies.plan_reply({"results": [{"ok": trace}]}, ops_)["results"][0]["ok"]


def test_a_drivers_trace_passes_the_schema_unchanged():
    _, ops_, trace = traced()
    assert plain(check(ops_, copy.deepcopy(trace))) == trace


def forged(change):
    _, ops_, trace = traced()
    trace = copy.deepcopy(trace)
    change(trace)
    with pytest.raises(replies.MalformedReply) as malformed:
        check(ops_, trace)
    return str(malformed.value)


@pytest.mark.parametrize(
    "change, words",
    [
        (
            lambda t: t["steps"][3]["produced"].update({"s0": 1}),
            "step 3's produced tokens are not those the driver gives",
        ),
        (lambda t: t["steps"][0]["batch"][0].__setitem__(1, True), "start is bool True"),
        (
            lambda t: t["steps"][0]["batch"][0].__setitem__(3, list(range(65))),
            "a table of 65 blocks, more than the driver records",
        ),
        (lambda t: t["steps"][0]["batch"][0].__setitem__(0, "x" * 101), "has an entry of list"),
        (
            lambda t: t["steps"][0]["batch"].extend([["s0", 0, 1, []]] * 16),
            "holds 17 entries, more than the driver records",
        ),
        (lambda t: t["steps"][2].__setitem__("at", 0), "is at int 0, not after 1"),
        (lambda t: t["adds"].reverse(), "where the driver adds the workload's requests in arrival"),
        (
            lambda t: t["steps"][1].__setitem__("free_after_update", "62"),
            "free_after_update is str",
        ),
        (lambda t: t["steps"][1].__setitem__("free_after_update", 2**64), "out of range"),
        (lambda t: t.__setitem__("stalled", 1), "stalled is int 1"),
        (
            lambda t: t.__setitem__(
                "error",
                {
                    "call": "exec",
                    "step": 0,
                    "kind": "raised",
                    "type": "",
                    "message": "",
                    "traceback": "",
                },
            ),
            "error is dict",
        ),
        (lambda t: t["steps"].extend([t["steps"][-1]] * 200), "at most 200 are driven"),
        (lambda t: t.__setitem__("extra", 1), "unexpected keys"),
    ],
)
def test_a_forged_or_oversized_trace_is_malformed(change, words):
    assert words in forged(change)


def test_the_schema_clips_an_error_of_the_candidates():
    solution = load(SOLUTION, name="loud")

    class Loud(solution.Scheduler):
        def schedule(self):
            raise ValueError("\x1b[2J" + "y" * 5000)

    _, ops_, trace = traced(scheduler=SimpleNamespace(Request=solution.Request, Scheduler=Loud))
    error = check(ops_, trace).error
    assert len(error.message) <= 2000 and error.call == "schedule"


def test_the_reference_figures_are_the_replays_own():
    kind, load_ = workloads.public()[-1]
    figures = grading._figures(("test", kind), load_)
    trace = drive(
        reference.ReferenceScheduler, load_, figures.max_steps, request_type=reference.Request
    )
    found = grading.replay(load_, replies.drive_trace(trace, load_, figures.max_steps))
    assert (figures.steps, figures.prompt_tokens, figures.prompt_tokens_computed) == (
        found.steps,
        found.prompt_tokens,
        found.prompt_tokens_computed,
    )


# --- through real workers ---


@pytest.mark.slow
def test_kata_grades_the_solution_and_the_starter_on_the_batching_track():
    solved = grade(SOLUTION, track="batching", hidden=True, seed=5)
    assert [(i.id, i.status) for i in solved.items] == [(m.ITEM, "pass") for m in MODULES.values()]
    assert solved.score == 100
    untouched = grade(STARTER, track="batching")
    assert {i.status for i in untouched.items} == {"not_attempted"}


@pytest.mark.slow
def test_a_scheduler_that_forges_its_produced_tokens_gets_a_malformed_reply(hostile_file):
    path = hostile_file(
        "forges_produced_tokens", "scheduler.py", SOLUTION=repr(SOLUTION.read_text())
    )
    result = grade(path, track="batching", only={"batch-equivalence"})
    item = result.items[0]
    assert item.status == "error"
    assert "produced tokens are not those the driver gives" in item.message


@pytest.mark.slow
def test_a_scheduler_whose_ids_hold_escapes_is_named_escaped(hostile_file):
    path = hostile_file("ids_with_escapes", "scheduler.py", SOLUTION=repr(SOLUTION.read_text()))
    result = grade(path, track="batching", only={"budgets"})
    message = result.items[0].message
    assert result.items[0].status == "fail" and "\x1b" not in message and "\u202e" not in message
    assert "\\x1b[31m" in message and "\\u202e" in message


@pytest.mark.slow
def test_a_scheduler_that_floods_its_batch_fails_on_the_drivers_cap(hostile_file):
    path = hostile_file("floods_its_batch", "scheduler.py", SOLUTION=repr(SOLUTION.read_text()))
    result = grade(path, track="batching", only={"budgets", "fcfs"})
    assert [(i.status, i.message) for i in result.items] == [
        (
            "fail",
            "the staggered workload, step 0: schedule() returned 1000000 entries, more than "
            "4 x max_num_seqs (16)",
        )
    ] * 2


def chaos(rng):
    """A scheduler of random values within the driver's caps: unknown ids, negative starts,
    tables out of range, finishes at random, free counts at random."""

    class Chaos:
        def __init__(
            self, num_blocks, block_size, max_num_seqs, max_batched_tokens, *, prefix_caching=False
        ):
            self.blocks, self.ids, self.calls = num_blocks, [], 0

        @property
        def num_free_blocks(self):
            return rng.randint(-2, self.blocks + 2)

        def add(self, request):
            self.ids.append(request.id)

        def has_work(self):
            self.calls += 1
            return self.calls < 60

        def schedule(self):
            return [
                reference.Scheduled(
                    rng.choice(self.ids + ["zz"]),
                    rng.randint(-2, 40),
                    rng.randint(-1, 40),
                    tuple(rng.randint(-1, self.blocks) for _ in range(rng.randint(0, 12))),
                )
                for _ in range(rng.randint(0, 5))
            ]

        def update(self, new_tokens):
            return [seq_id for seq_id in self.ids if rng.random() < 0.05]

    return SimpleNamespace(Request=reference.Request, Scheduler=Chaos)


@pytest.mark.slow
def test_any_trace_within_the_schema_is_replayed_without_raising():
    kinds = workloads.public()
    for seed in range(100):
        rng = random.Random(seed)
        kind, load_ = kinds[seed % len(kinds)]
        _, ops_, trace = traced(load_, chaos(rng), max_steps=60)
        found = grading.replay(load_, check(ops_, trace))
        assert found.first, (seed, kind)  # chaos breaks some rule, named without an exception


def test_a_scheduler_that_never_preempts_is_told_of_its_stall_not_of_a_victim():
    """It leaves out the sequences that cannot grow while they keep their blocks, then stalls:
    the trace shows no blocks given back, so no one was preempted, and no victim is named."""
    wrong = next(w for w in SCHEDULERS if w.name == "never-preempts")
    found = verdicts(InProcess(load(SOLUTION, wrong.mutant.source(), wrong.name)))
    assert found["preemption"].startswith("Fail: ") and "stalls" in found["preemption"]
    assert MODULES["preemption"].LIKELY["stall-empty"] in found["preemption"]
    for verdict in found.values():
        assert MODULES["preemption"].LIKELY["victim"] not in verdict
        assert "was preempted" not in verdict, verdict
