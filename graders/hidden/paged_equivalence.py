"""Hidden paged-equivalence: seeded random workloads on tight pools.

The public item runs one fixed script with 4-position blocks. Here each case is a random
workload drawn from its seed: sequences added, grown by chunks, and freed at random, in a pool
sized to the workload's peak (plus 0 to 2 blocks), so freed blocks are always reused and tables
scatter; block sizes 1, 3 and 16; head layouts MHA, GQA (groups of 2 to 8) and MQA; every other
append's key and value non-contiguous (strided last dimension). After every append and free,
one attend over every live sequence in shuffled order, one of them twice, and an empty one, each
row against float64 attention over its own positions. A last case grows three sequences to a
few hundred positions each, with a free in the middle: index arithmetic that only holds for
short tables (a fixed-size gather, block ids assumed small) shows there.
"""

from __future__ import annotations

import math

import torch

from graders import cases
from graders.candidate import Candidate, Plan
from graders.compare import TOLERANCE
from graders.hidden import _cases
from graders.items.paged_equivalence import EMPTY, Pool

ITEM = "paged-equivalence"

TOL = TOLERANCE[torch.float32]
LAYOUTS = ((4, 4), (6, 3), (8, 2), (16, 2), (5, 1), (1, 1))
CASES = [  # seed, block size, events, largest chunk
    (_cases.BASE_SEED + 5000, 1, 30, 6),
    (_cases.BASE_SEED + 5001, 3, 30, 8),
    (_cases.BASE_SEED + 5002, 16, 30, 24),
]
LONG_SEED = _cases.BASE_SEED + 5010


def grade(candidate: Candidate) -> str:
    for seed, bs, events, most in CASES:
        g = cases.generator(seed)
        _check(candidate, g, seed, bs, random_script(g, events, most), "a random workload")
    g = cases.generator(LONG_SEED)
    ids = [10, 11, 12]
    script = [("add", s) for s in ids]
    for r in range(12):
        if r == 6:  # one sequence ends; a new one takes its blocks
            script += [("free", 11), ("add", 13)]
            ids = [10, 13, 12]
        script += [("append", s, _cases.randint(g, 10, 40)) for s in ids]
    _check(candidate, g, LONG_SEED, 16, script, "three sequences of a few hundred positions")
    return (f"{len(CASES) + 1} seeded workloads (block sizes 1, 3, 16, random head layouts, "
            f"non-contiguous inputs, a few hundred positions) within {TOL}")


def random_script(g, events: int, most: int) -> list[tuple]:
    """Random adds, appends (most of the events) and frees, as (op, seq[, t])."""
    script, live, next_id = [], [], 10
    for _ in range(events):
        r = _cases.randint(g, 0, 9)
        if not live or (r == 0 and len(live) < 6):
            script.append(("add", next_id))
            live.append(next_id)
            next_id += 1
        elif r == 1 and len(live) > 1:
            script.append(("free", live.pop(_cases.randint(g, 0, len(live) - 1))))
        else:
            script.append(("append", _cases.choice(g, tuple(live)), _cases.randint(g, 1, most)))
    return script


def _peak(script, bs: int) -> int:
    lengths, peak = {}, 0
    for op, s, *t in script:
        lengths[s] = lengths.get(s, 0) + (t[0] if op == "append" else 0)
        if op == "free":
            del lengths[s]
        peak = max(peak, sum(math.ceil(n / bs) for n in lengths.values()))
    return peak


def _check(candidate: Candidate, g, seed: int, bs: int, script, what: str) -> None:
    Hq, Hkv = _cases.choice(g, LAYOUTS)
    D = _cases.choice(g, (8, 16, 32))
    kind = "MHA" if Hq == Hkv else "MQA" if Hkv == 1 else f"GQA {Hq}/{Hkv}"
    case = _cases.name(seed, f"{what}, block_size {bs}, {kind}, head_dim {D}")
    plan = Plan()
    pool = Pool(plan, g, _peak(script, bs) + _cases.randint(g, 0, 2), bs, Hq, Hkv, D)
    pool.add(EMPTY)
    for n, (op, seq, *t) in enumerate(script):
        if op == "append":
            pool.append(seq, t=t[0], noncontiguous=bool(n % 2))
        else:
            getattr(pool, op)(seq)
        live = [s for s in pool.seqs if s != EMPTY]
        if op != "add" and live:
            order = torch.randperm(len(live), generator=g).tolist()
            batch = [live[i] for i in order] + [_cases.choice(g, tuple(live)), EMPTY]
            pool.attend(batch, f"event {n + 1} ({op})")
    pool.check(_cases.run(candidate, plan, case), TOL, case)
