"""paged-equivalence: paged attention equals dense attention, in a fragmented pool.

Public: six sequences share one pool of 4-position blocks; appends of 1 to 9 positions (most crossing a
block boundary) are interleaved with frees, so freed blocks are reused by other sequences and
tables end up out of order and far apart. After every append and free, one attend over every
live sequence, an id repeated, and a sequence that never got a position (zeros expected), each
row compared with float64 attention over that sequence's own keys and values
(graders.shared.reference), for MHA 4/4, GQA 8/2 and MQA 4/1. A bfloat16 pool must answer in bfloat16.
What this catches: blocks read in an order other than the table, slots past a sequence's length
in its last block (stale data of a freed sequence), NaN for an empty sequence, a GQA head
mapping other than h // (Hq // Hkv), a missing 1/sqrt(D).
Last, the dense contract's validation, kept light: append with wrong kv_heads, head_dim, rank,
dtype or device, and attend with a bad query raise ValueError and change nothing.
Each workload is played on a graders.serving.pool.Pool, the judge's copy of every sequence.

Hidden: seeded random workloads (graders.serving.scripts.workload) on tight pools: sequences added,
grown by chunks, and freed at random, in a pool sized to the workload's peak (plus 0 to 2 blocks),
so freed blocks are always reused and tables scatter; block sizes 1, 3 and 16; head layouts MHA,
GQA (groups of 2 to 8) and MQA; every other append's key and value non-contiguous (strided last
dimension). After every append and free, one attend over every live sequence in shuffled order, one
of them twice, and an empty one. A last case grows three sequences to a few hundred positions each,
with a free in the middle: index arithmetic that only holds for short tables (a fixed-size gather,
block ids assumed small) shows there. And a case of logits far below zero: three sequences of 5 to
15 positions (last blocks partly written), GQA 4/2, whose logits all sit near one offset per KV
head between -30000 and -12000, exact in float32 (integer keys and queries: one large coordinate,
small ones elsewhere, head_dim 16): the slots past each length must get weight 0 however low the
logits, so a mask by a finite value (-1e4, the mask of older fp16 code) takes all the weight there.
Measured over 20 seeds, the reference, tests/implementations' paged_heap and paged_vllm and the
tiled-paged step are within 5.3e-7 of the float64 reference: the float32 tolerance holds.
"""

from __future__ import annotations

import torch

from graders.judge.candidate import Candidate
from graders.serving.pool import Pool
from graders.serving.scripts import peak_blocks, workload
from graders.shared import cases, hidden_cases
from graders.shared.compare import TOLERANCE
from graders.shared.plans import Fail, Plan, Raised

ITEM = "paged-equivalence"

NUM_BLOCKS, BLOCK_SIZE, D = 24, 4, 16
LAYOUTS = ((4, 4), (8, 2), (4, 1))  # (Hq, Hkv): MHA, GQA, MQA
EMPTY = 3  # added, never written
SCRIPT = (
    ("add", 0),
    ("add", 1),
    ("add", 2),
    ("add", EMPTY),
    ("append", 0, 3),
    ("append", 1, 6),
    ("append", 2, 2),
    ("add", 4),
    ("append", 4, 5),
    ("append", 0, 4),
    ("append", 2, 7),
    ("free", 1),
    ("append", 4, 6),
    ("append", 0, 9),
    ("add", 5),
    ("append", 5, 5),
    ("free", 4),
    ("append", 2, 1),
    ("append", 5, 8),
    ("append", 0, 2),
    ("append", 5, 3),
)

HIDDEN_LAYOUTS = ((4, 4), (6, 3), (8, 2), (16, 2), (5, 1), (1, 1))
HIDDEN_CASES = [  # seed, block size, events, largest chunk
    (5000, 1, 30, 6),
    (5001, 3, 30, 8),
    (5002, 16, 30, 24),
]
LONG_SEED = 5010
LONG_BLOCK_SIZE = 4
FAR_SEED = 5020
FAR_LAYOUT, FAR_D, FAR_BLOCK_SIZE = (4, 2), 16, 4


def grade(candidate: Candidate) -> str:
    for seed, (Hq, Hkv) in enumerate(LAYOUTS, start=600):
        case = f"{'MHA' if Hq == Hkv else 'MQA' if Hkv == 1 else 'GQA'} {Hq}/{Hkv}"
        plan = Plan()
        _run_script(
            Pool(plan, cases.generator(seed), NUM_BLOCKS, BLOCK_SIZE, Hq, Hkv, D),
            SCRIPT,
            candidate,
            TOLERANCE[torch.float32],
            case,
        )
    plan = Plan()
    _run_script(
        Pool(plan, cases.generator(610), NUM_BLOCKS, BLOCK_SIZE, 4, 2, D, torch.bfloat16),
        SCRIPT[:12],
        candidate,
        TOLERANCE[torch.bfloat16],
        "a bfloat16 pool (GQA 4/2)",
    )
    _validation(candidate)
    return (
        f"{len(LAYOUTS)} head layouts on a fragmented pool ({len(SCRIPT)} steps of appends "
        f"and frees) within {TOLERANCE[torch.float32]} of float64 attention, bfloat16 in "
        "bfloat16, empty sequences give zeros; bad appends and queries raise ValueError"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, bs, events, most in hidden_cases.seeded(HIDDEN_CASES):
        g = cases.generator(seed)
        _run_hidden(candidate, g, seed, bs, workload(g, events, most), "a random workload")
    g = cases.generator(hidden_cases.seed(LONG_SEED))
    _run_hidden(
        candidate,
        g,
        hidden_cases.seed(LONG_SEED),
        LONG_BLOCK_SIZE,
        _long_script(g),
        "three sequences of a few hundred positions",
    )
    _far_below_zero(candidate, hidden_cases.seed(FAR_SEED))
    return (
        f"{len(HIDDEN_CASES) + 1} seeded workloads (block sizes 1, 3, 16, random head "
        f"layouts, non-contiguous inputs, a few hundred positions) and logits far below zero, "
        f"within {TOLERANCE[torch.float32]}"
    )


def _run_script(pool: Pool, script, candidate: Candidate, tol, case: str) -> None:
    """After every append and free: attend over the live sequences, the first again, the empty."""
    for op, seq, *t in script:
        getattr(pool, op)(seq, **({"t": t[0]} if t else {}))
        if op != "add":
            live = [s for s in pool.seqs if s != EMPTY]
            after = f"{op} {seq}" + (f" ({t[0]} positions)" if t else "")
            pool.attend(live + live[:1] + [EMPTY], after)
    pool.check(candidate.run(pool.plan), tol, case)


def _validation(candidate: Candidate) -> None:
    g, plan = cases.generator(620), Plan()
    pool = Pool(plan, g, 8, BLOCK_SIZE, 2, 2, 8)
    pool.add(0)
    pool.append(0, t=5)
    x = cases.randn(g, 2, 1, 8)
    bad = [
        ("append with 3 kv heads on a 2-head pool", "append", cases.randn(g, 3, 1, 8)),
        ("append with head_dim 6 on a head_dim 8 pool", "append", cases.randn(g, 2, 1, 6)),
        ("append with a 4-d key and value", "append", x[None]),
        ("a float64 append to a float32 pool", "append", x.double()),
        ("an append on the meta device", "append", {"meta": x}),
        ("attend with a head_dim 6 query", "attend", cases.randn(g, 1, 2, 1, 6)),
        ("attend with 3 query heads on 2 kv heads", "attend", cases.randn(g, 1, 3, 1, 8)),
        ("attend with 2 query rows for 1 sequence id", "attend", cases.randn(g, 2, 2, 1, 8)),
        ("attend with a float64 query", "attend", cases.randn(g, 1, 2, 1, 8).double()),
    ]
    ops = [
        (
            what,
            plan.call("p", op, *((0, arg, arg) if op == "append" else ([0], arg)), may_raise=True),
        )
        for what, op, arg in bad
    ]
    pool.attend([0], "the rejected calls")  # they changed nothing: still the 5 positions
    results = candidate.run(plan)
    for what, index in ops:
        raised = results[index]
        if not (isinstance(raised, Raised) and raised.is_a("ValueError")):
            did = (
                f"raised {raised.type}: {raised.message}"
                if isinstance(raised, Raised)
                else "was accepted"
            )
            raise Fail(
                f"{what} {did}; expected ValueError (append and attend validate like the "
                "dense cache's)"
            )
    pool.check(results, TOLERANCE[torch.float32], "after rejected appends and queries")


def _long_script(g: torch.Generator) -> list[tuple]:
    """Three sequences growing by 12 to 40 positions in turns; midway one ends and a new one
    takes its blocks. Sequence 10 grows 12 times: at least 144 positions, 36 blocks of
    LONG_BLOCK_SIZE, past any fixed block index of 32 entries, whatever the seed."""
    ids = [10, 11, 12]
    script = [("add", s) for s in ids]
    for r in range(12):
        if r == 6:
            script += [("free", 11), ("add", 13)]
            ids = [10, 13, 12]
        script += [("append", s, cases.randint(g, 12, 40)) for s in ids]
    return script


def _run_hidden(
    candidate: Candidate, g: torch.Generator, seed: int, bs: int, script, what: str
) -> None:
    """Play `script` on a pool of a random head layout sized to its peak; after every append and
    free, attend over the live sequences shuffled, one of them again, and the empty one."""
    Hq, Hkv = cases.choice(g, HIDDEN_LAYOUTS)
    D = cases.choice(g, (8, 16, 32))
    case = hidden_cases.name(
        seed, f"{what}, block_size {bs}, {hidden_cases.layout(Hq, Hkv)}, head_dim {D}"
    )
    plan = Plan()
    pool = Pool(plan, g, peak_blocks(script, bs) + cases.randint(g, 0, 2), bs, Hq, Hkv, D)
    pool.add(EMPTY)
    for n, (op, seq, *t) in enumerate(script):
        if op == "append":
            pool.append(seq, t=t[0], noncontiguous=bool(n % 2))
        else:
            getattr(pool, op)(seq)
        live = [s for s in pool.seqs if s != EMPTY]
        if op != "add" and live:
            order = torch.randperm(len(live), generator=g).tolist()
            batch = [live[i] for i in order] + [cases.choice(g, tuple(live)), EMPTY]
            pool.attend(batch, f"event {n + 1} ({op})")
    pool.check(hidden_cases.run(candidate, plan, case), TOLERANCE[torch.float32], case)


def _far_below_zero(candidate: Candidate, seed: int) -> None:
    """Three sequences with partly written last blocks, every logit near its KV head's offset in
    -30000..-12000 and exact in float32: attention over each sequence's own positions."""
    g = cases.generator(seed)
    (Hq, Hkv), D, bs = FAR_LAYOUT, FAR_D, FAR_BLOCK_SIZE
    case = hidden_cases.name(
        seed,
        f"logits far below zero, partly written last blocks, "
        f"{hidden_cases.layout(Hq, Hkv)}, head_dim {D}",
    )
    plan = Plan()
    pool = Pool(plan, g, 16, bs, Hq, Hkv, D)
    offsets = torch.randint(-30000, -12000, (Hkv,), generator=g)  # each KV head's logits
    for seq in range(3):
        t = cases.randint(g, 5, 15)
        t += t % bs == 0  # a last block partly written
        pool.add(seq)
        pool.append(seq, key=cases.exact_keys(g, offsets, t, D), value=pool.kv(t))
    pool.attend([0, 1, 2], "three appends", query=cases.exact_queries(g, 3, Hq, 1, D=D))
    pool.check(hidden_cases.run(candidate, plan, case), TOLERANCE[torch.float32], case)
