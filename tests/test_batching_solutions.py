"""The schedulers of the batching track (contract section 6) against each other and the rules.

Each scheduler runs through the track's own driver (graders.worker.batching.drive: adds by
arrival, `schedule`, the oracle's tokens fed to `update`, a trace of plain data). Until the
judge's replay and items land, a slot ledger of this file (no model: the oracle tokens are made
up) reads each trace: the budgets, that a sequence reads only slots holding its own token
prefix, that nothing written in a step is in another table of that step, num_free_blocks within
what the live tables allow, every request's tokens, every block free at the end.

- The solution, the reference and one_queue agree step for step on mixed workloads: the same
  batches (ids, starts, tokens, and tables up to block names), finished ids and free counts.
- Each rule on a scripted case, its steps written out: decode first, chunking, head of line,
  the preemption victim, no start in a step that preempted, recompute, prefix sharing from the
  next step only and never after a different prefix, LRU eviction of the tail first, static
  batching, the errors of `add` and `update`; the starter is a stub of the same contract.
- Each wrong scheduler (tests/wrong/batching.py) breaks the rule it is named for.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from cli import app
from graders.batching import reference
from graders.shared.mutation import Mutant, strip_prose
from graders.worker.batching import drive
from tests.wrong.batching import SCHEDULERS

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = ROOT / "solutions" / "scheduler.py"
ONE_QUEUE = ROOT / "tests" / "implementations" / "batching" / "one_queue.py"
STARTER = ROOT / "starter" / "scheduler.py"


def load(path: Path, source: str | None = None, name: str | None = None):
    """The module at `path` (or `source`), imported as `_batching_NAME` (default: its stem).
    It goes in sys.modules: dataclasses look their module up there."""
    spec = importlib.util.spec_from_loader(f"_batching_{name or path.stem}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(
        compile(source if source is not None else path.read_text(), str(path), "exec"),
        module.__dict__,
    )
    return module


REFERENCE = SimpleNamespace(Request=reference.Request, Scheduler=reference.ReferenceScheduler)
STATIC = SimpleNamespace(
    Request=reference.Request, Scheduler=partial(reference.ReferenceScheduler, static=True)
)


# --- workloads: plain data, as the design's driver takes them (oracle tokens made up) ---


def workload(config: dict, requests: list[dict], seed: int = 0) -> dict:
    """`requests` without oracles get one: random tokens (1..63, never eos) up to
    max_new_tokens, ending at eos when it is shorter (`"alone"`: how many it produces)."""
    rng = random.Random(seed)
    oracle = {}
    for r in requests:
        length = r.pop("alone", r["max_new_tokens"])
        tokens = [rng.choice([t for t in range(1, 64) if t != r.get("eos")]) for _ in range(length)]
        if length < r["max_new_tokens"]:
            tokens[-1] = r["eos"]
        oracle[r["id"]] = tokens
    full = {
        "num_blocks": 16,
        "block_size": 4,
        "max_num_seqs": 4,
        "max_batched_tokens": 16,
        "prefix_caching": False,
    } | config
    return {"config": full, "requests": requests, "oracle": oracle}


def request(id, prompt, max_new_tokens, arrival=0, eos=None, alone=None) -> dict:
    r = {
        "id": id,
        "prompt": list(prompt),
        "max_new_tokens": max_new_tokens,
        "eos": eos,
        "arrival": arrival,
    }
    if alone is not None:
        r["alone"] = alone
    return r


def mixed(seed: int, prefix_caching: bool = False, num_blocks: int = 24) -> dict:
    """Staggered arrivals, prompts of 1 to 40 tokens, outputs of 1 to 30, some ending at EOS,
    a pool that forces preemption, a prompt longer than the token budget; with prefix caching,
    half of them share a system prompt of three blocks."""
    rng = random.Random(seed)
    system = [rng.randrange(1, 64) for _ in range(12)]
    requests = []
    for i in range(12):
        prompt = [rng.randrange(1, 64) for _ in range(rng.randint(1, 40))]
        if prefix_caching and i % 2:
            prompt = system + prompt[:8]
        new = rng.randint(1, 30)
        requests.append(
            request(
                f"r{i}",
                prompt,
                new,
                arrival=rng.randint(0, 20) * (i > 0),
                eos=0,
                alone=rng.randint(1, new) if i % 3 == 0 else new,
            )
        )
    requests.sort(key=lambda r: r["arrival"])
    return workload(
        {
            "num_blocks": num_blocks,
            "block_size": 4,
            "max_num_seqs": 4,
            "max_batched_tokens": 24,
            "prefix_caching": prefix_caching,
        },
        requests,
        seed,
    )


# --- the driver (graders.worker.batching) and a ledger of this file's ---


def run(module, load_: dict, max_steps: int = 600) -> dict:
    """The trace of `module`'s Scheduler over `load_`, driven as the judge drives it."""
    return drive(module.Scheduler, load_, max_steps, request_type=module.Request)


def violations(trace: dict, load_: dict) -> list[str]:
    """The rules `trace` breaks, as this file's ledger reads them: budgets, slots read that hold
    another prefix, num_free_blocks out of what the tables allow, an incomplete or stalled run,
    blocks not all free at the end."""
    config, oracle = load_["config"], load_["oracle"]
    known = {r["id"]: list(r["prompt"]) for r in load_["requests"]}
    ledger = Ledger(config["num_blocks"], config["block_size"])
    found = []
    for n, step in enumerate(trace["steps"]):
        batch = [reference.Scheduled(*entry[:3], tuple(entry[3])) for entry in step["batch"]]
        found += [f"step {n}: {v}" for v in ledger.step(batch, known, config)]
        for i, token in step["produced"].items():
            known[i].append(token)
        ledger.finish(step["finished"])
        # A preempted sequence's latest table is stale until it runs again: the free count lies
        # between what the live tables hold and what this step's unfinished sequences hold.
        low = config["num_blocks"] - ledger.held()
        high = config["num_blocks"] - len(
            {b for e in batch if e.seq_id not in step["finished"] for b in e.block_table}
        )
        if not low <= step["free_after_update"] <= high:
            found.append(
                f"step {n}: block accounting: num_free_blocks "
                f"{step['free_after_update']}, not in {low}..{high}"
            )
    if trace["error"] or trace["stalled"]:
        found.append(f"end: error {trace['error']}, stalled {trace['stalled']}")
    elif trace["steps"] and trace["steps"][-1]["free_after_update"] != config["num_blocks"]:
        found.append(f"end: block accounting: {trace['steps'][-1]['free_after_update']} free")
    prompt_lengths = {r["id"]: len(r["prompt"]) for r in load_["requests"]}
    for i, tokens in oracle.items():
        if known[i][prompt_lengths[i] :] != tokens:
            found.append(f"end: {i} did not produce its {len(tokens)} tokens")
    return found


class Ledger:
    """What each slot of the pool holds (a token prefix) and which blocks live tables hold."""

    def __init__(self, num_blocks: int, block_size: int):
        self.block_size = block_size
        self.slots: dict[tuple[int, int], tuple[int, ...]] = {}
        self.tables: dict[str, tuple[int, ...]] = {}  # each live sequence's latest table

    def step(self, batch, known: dict[str, list[int]], config: dict) -> list[str]:
        found, bs = [], self.block_size
        if len(batch) > config["max_num_seqs"]:
            found.append(f"budgets: {len(batch)} sequences")
        if sum(e.tokens for e in batch) > config["max_batched_tokens"]:
            found.append(f"budgets: {sum(e.tokens for e in batch)} tokens")
        writers: dict[int, str] = {}
        for e in batch:
            self.tables[e.seq_id] = tuple(e.block_table)
            if e.start < 0 or e.tokens < 1 or e.start + e.tokens > len(known[e.seq_id]):
                found.append(f"budgets: {e.seq_id} computes {e.start}+{e.tokens}")
                continue
            if len(e.block_table) * bs < e.start + e.tokens or any(
                not 0 <= b < config["num_blocks"] for b in e.block_table
            ):
                found.append(f"budgets: {e.seq_id}'s table {e.block_table}")
                continue
            for p in range(e.start):
                held = self.slots.get((e.block_table[p // bs], p % bs))
                if held != tuple(known[e.seq_id][: p + 1]):
                    found.append(
                        f"equivalence: {e.seq_id} position {p} reads a slot of another prefix"
                    )
                    break
            for b in {e.block_table[p // bs] for p in range(e.start, e.start + e.tokens)}:
                if b in writers:
                    found.append(f"budgets: block {b} written by {writers[b]} and {e.seq_id}")
                writers[b] = e.seq_id
        for e in batch:
            for other in batch:
                if other is not e and any(writers.get(b) == e.seq_id for b in other.block_table):
                    found.append(f"budgets: {other.seq_id}'s table holds a block {e.seq_id} writes")
        for e in batch:
            if (
                e.start + e.tokens <= len(known[e.seq_id])
                and len(e.block_table) * bs >= e.start + e.tokens
            ):
                for p in range(e.start, e.start + e.tokens):
                    self.slots[(e.block_table[p // bs], p % bs)] = tuple(known[e.seq_id][: p + 1])
        return found

    def finish(self, ids) -> None:
        for i in ids:
            self.tables.pop(i, None)

    def held(self) -> int:
        return len({b for t in self.tables.values() for b in t})


def canonical(trace: dict) -> list[tuple]:
    """Each step with block ids renamed by first appearance in the step: two schedulers that
    choose different free blocks but share and grow alike read the same."""
    steps = []
    for s in trace["steps"]:
        names: dict[int, int] = {}
        batch = tuple(
            (i, start, n, tuple(names.setdefault(b, len(names)) for b in table))
            for i, start, n, table in s["batch"]
        )
        steps.append(
            (s["at"], batch, tuple(s["finished"]), s["free_after_schedule"], s["free_after_update"])
        )
    return steps


# --- the correct schedulers ---

CORRECT = {
    "reference": lambda: REFERENCE,
    "solution": lambda: load(SOLUTION),
    "one_queue": lambda: load(ONE_QUEUE),
}
MIXED = [(seed, caching) for seed in range(4) for caching in (False, True)]


@pytest.mark.parametrize("seed,caching", MIXED)
def test_the_solution_reference_and_one_queue_agree_step_for_step(seed, caching):
    load_ = mixed(seed, caching)
    expected = run(REFERENCE, load_)
    assert violations(expected, load_) == []
    for name in ("solution", "one_queue"):
        trace = run(CORRECT[name](), load_)
        assert violations(trace, load_) == [], name
        assert canonical(trace) == canonical(expected), name


def test_the_mixed_workloads_preempt_chunk_and_hit_the_prefix_cache():
    """The agreement above means something: the workloads do what they are for."""
    restarts = chunks = hits = 0
    for seed, caching in MIXED:
        load_ = mixed(seed, caching)
        done: dict[str, int] = {}
        for step in run(REFERENCE, load_)["steps"]:
            for seq_id, start, tokens, _ in step["batch"]:
                restarts += seq_id in done and start < done[seq_id]
                hits += seq_id not in done and start > 0
                chunks += tokens > 1 and seq_id not in step["produced"]
                done[seq_id] = start + tokens
    assert restarts >= 20 and chunks >= 20 and hits >= 12, (restarts, chunks, hits)


S = list(range(1, 9))  # a system prompt of two blocks of 4
SCRIPTED = {
    # Decode first (A's 1 before B's chunk at step 1), B's prompt in chunks of what is left,
    # C kept out by max_num_seqs until A and B finish.
    "decode-first": (
        workload(
            {"num_blocks": 6, "block_size": 4, "max_num_seqs": 2, "max_batched_tokens": 8},
            [
                request("A", range(1, 6), 3),
                request("B", range(10, 20), 2),
                request("C", range(30, 33), 2, arrival=1),
            ],
        ),
        [
            [("A", 0, 5), ("B", 0, 3)],
            [("A", 5, 1), ("B", 3, 7)],
            [("A", 6, 1), ("B", 10, 1)],
            [("C", 0, 3)],
            [("C", 3, 1)],
        ],
    ),
    # A decodes at every step while B's 30-token prompt goes through in chunks.
    "decodes-go-on": (
        workload(
            {"num_blocks": 16, "block_size": 4, "max_num_seqs": 2, "max_batched_tokens": 8},
            [request("A", [1, 2], 4), request("B", range(1, 31), 1, arrival=1)],
        ),
        [
            [("A", 0, 2)],
            [("A", 2, 1), ("B", 0, 7)],
            [("A", 3, 1), ("B", 7, 7)],
            [("A", 4, 1), ("B", 14, 7)],
            [("B", 21, 8)],
            [("B", 29, 1)],
        ],
    ),
    # B (3 blocks) does not fit the one free block; C (1 block) would, but waits behind B.
    "head-of-line": (
        workload(
            {"num_blocks": 6, "block_size": 4, "max_num_seqs": 3, "max_batched_tokens": 64},
            [
                request("A", range(1, 17), 5),
                request("B", range(1, 13), 1, arrival=1),
                request("C", [5, 6], 1, arrival=1),
            ],
        ),
        [
            [("A", 0, 16)],
            [("A", 16, 1)],
            [("A", 17, 1)],
            [("A", 18, 1)],
            [("A", 19, 1)],
            [("B", 0, 12), ("C", 0, 2)],
        ],
    ),
    # At step 2 A needs a third block: B, the newest, is preempted; D, arrived then, does not
    # start in that step, and then waits behind B, which recomputes its prompt and 2 tokens.
    "preemption": (
        workload(
            {"num_blocks": 4, "block_size": 2, "max_num_seqs": 2, "max_batched_tokens": 8},
            [
                request("A", range(1, 4), 4),
                request("B", range(10, 13), 3),
                request("D", [7], 1, arrival=2),
            ],
        ),
        [
            [("A", 0, 3), ("B", 0, 3)],
            [("A", 3, 1), ("B", 3, 1)],
            [("A", 4, 1)],
            [("A", 5, 1)],
            [("B", 0, 5), ("D", 0, 1)],
        ],
    ),
    # C computes S beside A (shared only from the step after); B, a step later, starts after
    # S's two blocks; D begins with S's second block's tokens after no prefix: no hit.
    "prefix": (
        workload(
            {
                "num_blocks": 16,
                "block_size": 4,
                "max_num_seqs": 4,
                "max_batched_tokens": 64,
                "prefix_caching": True,
            },
            [
                request("A", S + [20], 2),
                request("C", S + [21], 2),
                request("B", S + [22], 2, arrival=1),
                request("D", S[4:] + [23], 2, arrival=1),
            ],
        ),
        [
            [("A", 0, 9), ("C", 0, 9)],
            [("A", 9, 1), ("C", 9, 1), ("B", 8, 1), ("D", 0, 5)],
            [("B", 9, 1), ("D", 5, 1)],
        ],
    ),
    # 4 blocks, all cached after A and B. C's block evicts the least recently released: A's
    # tail (released before its head). D still finds B's two blocks, F finds A's head.
    "lru": (
        workload(
            {
                "num_blocks": 4,
                "block_size": 4,
                "max_num_seqs": 1,
                "max_batched_tokens": 64,
                "prefix_caching": True,
            },
            [
                request("A", S, 1),
                request("B", range(11, 19), 1, arrival=1),
                request("C", [40, 41, 42], 1, arrival=2),
                request("D", [*range(11, 19), 50], 1, arrival=3),
                request("F", S + [51], 1, arrival=4),
            ],
        ),
        [[("A", 0, 8)], [("B", 0, 8)], [("C", 0, 3)], [("D", 8, 1)], [("F", 4, 5)]],
    ),
}


def batches(trace: dict) -> list[list[tuple]]:
    return [
        [(seq_id, start, tokens) for seq_id, start, tokens, _ in step["batch"]]
        for step in trace["steps"]
    ]


@pytest.mark.parametrize("name", CORRECT)
@pytest.mark.parametrize("case", SCRIPTED)
def test_each_rule_on_its_scripted_case(case, name):
    load_, expected = SCRIPTED[case]
    trace = run(CORRECT[name](), load_)
    assert batches(trace) == expected
    assert violations(trace, load_) == []


@pytest.mark.parametrize("name", CORRECT)
def test_add_and_update_refuse_what_the_contract_refuses(name):
    module = CORRECT[name]()
    scheduler = module.Scheduler(4, 4, 2, 8)
    scheduler.add(module.Request("a", (1, 2), 3))
    for bad in (
        module.Request("a", (3,), 1),
        module.Request("b", (), 1),
        module.Request("c", (1,), 0),
        module.Request("d", tuple(range(16)), 2),
    ):
        with pytest.raises(ValueError):
            scheduler.add(bad)
    scheduler.add(module.Request("e", tuple(range(16)), 1))  # 16 positions: exactly the pool
    assert [(e.seq_id, e.start, e.tokens) for e in scheduler.schedule()] == [
        ("a", 0, 2),
        ("e", 0, 6),
    ]
    with pytest.raises(KeyError):
        scheduler.update({"z": 5})
    assert scheduler.update({"a": 7}) == []
    assert scheduler.num_free_blocks == 1 and scheduler.has_work()


@pytest.mark.parametrize("name", CORRECT)
def test_a_finished_id_may_arrive_again(name):
    module = CORRECT[name]()
    scheduler = module.Scheduler(4, 4, 2, 8)
    scheduler.add(module.Request("a", (1, 2), 1))
    scheduler.schedule()
    assert scheduler.update({"a": 7}) == ["a"] and not scheduler.has_work()
    scheduler.add(module.Request("a", (1, 2), 1))
    assert scheduler.has_work() and scheduler.num_free_blocks == 4


def test_iteration_level_scheduling_beats_static_batching_on_the_mixed_workloads():
    """The reference takes at most 0.7x static batching's steps (the contract's bar)."""
    for seed, caching in MIXED:
        load_ = mixed(seed, caching)
        steps, static = len(run(REFERENCE, load_)["steps"]), len(run(STATIC, load_)["steps"])
        assert steps <= 0.7 * static, (seed, caching, steps, static)
        assert violations(run(STATIC, load_), load_) == []


def test_prefix_caching_computes_fewer_prompt_tokens_on_a_shared_prefix():
    for seed in range(4):
        shared = mixed(seed, prefix_caching=True)
        uncached = shared | {"config": shared["config"] | {"prefix_caching": False}}
        computed = [
            sum(
                tokens
                for step in run(REFERENCE, load_)["steps"]
                for _, _, tokens, _ in step["batch"]
            )
            for load_ in (shared, uncached)
        ]
        assert computed[0] < 0.85 * computed[1], computed


# --- the starter ---


def test_the_starter_is_the_contract_stubbed():
    starter = load(STARTER)
    for cls, fields in (
        (starter.Request, ["id", "prompt", "max_new_tokens", "eos"]),
        (starter.Scheduled, ["seq_id", "start", "tokens", "block_table"]),
    ):
        assert list(cls.__dataclass_fields__) == fields
        assert cls.__dataclass_params__.frozen
    for module in (reference, load(SOLUTION), load(ONE_QUEUE)):
        for cls in ("Request", "Scheduled"):
            assert (
                getattr(module, cls).__dataclass_fields__.keys()
                == getattr(starter, cls).__dataclass_fields__.keys()
            )
        assert module.Request("x", (1,), 1).eos is None
    scheduler = starter.Scheduler(4, 4, 2, 8, prefix_caching=True)
    for call in (
        lambda: scheduler.add(starter.Request("a", (1,), 1)),
        scheduler.schedule,
        lambda: scheduler.update({}),
        scheduler.has_work,
        lambda: scheduler.num_free_blocks,
    ):
        with pytest.raises(NotImplementedError):
            call()
    trace = run(starter, SCRIPTED["decode-first"][0])
    assert trace["error"]["call"] == "add" and trace["error"]["type"] == "NotImplementedError"


# --- the wrong schedulers ---

BATCHING_ITEMS = {
    "batch-equivalence",
    "budgets",
    "iteration-level",
    "preemption",
    "fcfs",
    "block-accounting",
    "chunked-prefill",
    "prefix-caching",
}


def _mutant(name: str):
    wrong = next(w for w in SCHEDULERS if w.name == name)
    return load(SOLUTION, wrong.mutant.source(), name.replace("-", "_"))


def _scripted(name: str, case: str) -> tuple[list, list, list[str]]:
    """(the mutant's batches, the expected batches, its violations) on a scripted case."""
    load_, expected = SCRIPTED[case]
    trace = run(_mutant(name), load_)
    return batches(trace), expected, violations(trace, load_)


def test_the_wrong_schedulers_are_named_once_and_fail_batching_items():
    assert len({w.name for w in SCHEDULERS}) == len(SCHEDULERS) == 10
    for wrong in SCHEDULERS:
        assert wrong.fails and wrong.fails <= BATCHING_ITEMS, wrong.name


def test_static_batching_is_the_reference_with_static_true():
    load_ = mixed(0)
    assert canonical(run(_mutant("static-batching"), load_)) == canonical(run(STATIC, load_))
    got, expected, _ = _scripted("static-batching", "decodes-go-on")
    assert got[1] == [("A", 2, 1)] != expected[1]  # B waits for A to finish


def test_preempting_the_oldest_is_seen_at_the_first_preemption():
    got, expected, found = _scripted("preempts-oldest", "preemption")
    assert got[2] == [("B", 4, 1)] and expected[2] == [("A", 4, 1)] and found == []
    assert got[3][0] == ("A", 0, 5)  # A, the oldest, recomputes


def test_blocks_never_freed_leak_and_stall():
    got, _, found = _scripted("never-frees-finished", "lru")
    assert found[0] == "step 0: block accounting: num_free_blocks 2, not in 4..4"
    assert got[-1] == [] and any("stalled True" in f for f in found)


def test_a_hash_of_the_block_alone_shares_blocks_across_prefixes():
    got, expected, found = _scripted("prefix-hash-own-tokens", "prefix")
    assert got[1][3] == ("D", 4, 1) and expected[1][3] == ("D", 0, 5)
    assert found[0] == "step 1: equivalence: D position 0 reads a slot of another prefix"


def test_prefills_first_starve_a_decode():
    got, expected, found = _scripted("prefill-starves-decodes", "decodes-go-on")
    assert got[2] == [("B", 7, 8)] and ("A", 3, 1) in expected[2] and found == []


def test_one_seat_too_many_breaks_the_sequence_budget():
    _, _, found = _scripted("seats-off-by-one", "decode-first")
    assert found == ["step 2: budgets: 3 sequences"]


def test_skipping_the_head_starts_a_later_request_first():
    got, expected, found = _scripted("skips-the-head", "head-of-line")
    assert got[1] == [("A", 16, 1), ("C", 0, 2)] and expected[1] == [("A", 16, 1)]
    assert found == []


def test_a_free_count_off_by_one_is_wrong_from_the_first_step():
    for case in SCRIPTED:
        _, _, found = _scripted("free-count-off-by-one", case)
        assert found and found[0].startswith("step 0: block accounting"), case


def test_no_chunking_never_starts_a_prompt_longer_than_the_budget():
    got, _, found = _scripted("no-chunking", "decodes-go-on")
    assert all(seq_id != "B" for step in got for seq_id, _, _ in step)
    assert "end: B did not produce its 1 tokens" in found


def test_the_mutants_find_their_place_in_the_code_alone(tmp_path):
    """Built on the solution with its comments and docstrings removed, each mutant is the same:
    rewording the solution's prose changes no wrong scheduler."""
    stripped = tmp_path / "scheduler.py"
    stripped.write_text(strip_prose(SOLUTION.read_text()))
    for wrong in SCHEDULERS:
        again = Mutant(
            wrong.name, wrong.mutant.description, replace=wrong.mutant.replace, base=stripped
        )
        assert again.source() == wrong.mutant.source(), wrong.name


def test_kata_solution_scheduler_prints_the_solution():
    result = CliRunner().invoke(app, ["solution", "scheduler"])
    assert result.exit_code == 0
    assert result.stdout_bytes == SOLUTION.read_bytes()


def test_the_starters_examples_are_what_the_reference_does():
    """Each step of the starter's two worked examples, as the reference runs them."""
    examples = [
        SCRIPTED["decode-first"][0],
        workload(
            {"num_blocks": 4, "block_size": 2, "max_num_seqs": 2, "max_batched_tokens": 8},
            [request("A", range(1, 4), 4), request("B", range(10, 13), 3)],
        ),
    ]
    doc = " ".join(STARTER.read_text().split())
    for load_ in examples:
        for n, step in enumerate(run(REFERENCE, load_)["steps"]):
            shown = "   ".join(
                f"{seq_id}: {start}+{tokens} [{' '.join(map(str, table))}]"
                for seq_id, start, tokens, table in step["batch"]
            )
            assert f"{n} {' '.join(shown.split())} " in doc, shown
