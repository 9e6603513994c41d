"""Hidden prefix-equivalence: the newest-token output equals full causal attention after every
append, for chunked, non-contiguous and long inputs.

Still MHA with every row at the same length (ragged rows and GQA are other items' concerns).
Seeded cases, each compared after every append with the float64 reference:
- random shapes, a prompt then chunks of 1 to 6 positions into the non-empty cache, every other
  append non-contiguous: a mistake in where a chunk lands, or in reading a transposed input,
  shows at the next prefix;
- `KVCache(capacity=N)` with N not a power of two and chunks that cross it: the copy made when
  storage grows must keep every position;
- a long cache, ~2000 positions, most of them in three big appends: storage or masks of some
  fixed size, or storage that cannot grow by more than it holds in one append, show.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Plan
from graders.compare import TOLERANCE, require_close
from graders.hidden import _cases

ITEM = "prefix-equivalence"

TOL = TOLERANCE[torch.float32]
SEEDS = [_cases.BASE_SEED + 300 + i for i in range(2)]
CAPACITY_SEED = _cases.BASE_SEED + 310
LONG_SEED = _cases.BASE_SEED + 320
LONG_APPENDS = (1, 2, 600, 1, 700, 1, 691, 1, 1, 1, 1, 1)  # 2001 positions


def grade(candidate: Candidate) -> str:
    for seed in SEEDS:
        g = cases.generator(seed)
        B, H, D = _cases.randint(g, 1, 3), _cases.randint(g, 1, 4), _cases.choice(g, (8, 16, 32))
        prompt = _cases.randint(g, 1, 8)
        appends = [prompt] + _cases.chunks(g, _cases.randint(g, 20, 40), 6)
        _check(candidate, g, seed, B, H, D, None, appends,
               f"{_cases.shape(B, H, D)}, a prompt then chunks, every other one non-contiguous")
    g = cases.generator(CAPACITY_SEED)
    capacity = _cases.choice(g, (11, 13, 19, 23))
    appends = _cases.chunks(g, 3 * capacity, 7)
    _check(candidate, g, CAPACITY_SEED, 2, 2, 16, capacity, appends,
           f"KVCache(capacity={capacity}), chunks that cross the capacity")
    g = cases.generator(LONG_SEED)
    _check(candidate, g, LONG_SEED, 1, 2, 8, None, LONG_APPENDS,
           f"a long cache: {sum(LONG_APPENDS)} positions, appends of up to {max(LONG_APPENDS)}")
    return (f"{len(SEEDS) + 2} seeded cases (chunked, non-contiguous, preallocated, "
            f"{sum(LONG_APPENDS)} positions): every prefix within {TOL} of full causal "
            "attention")


def _check(candidate: Candidate, g, seed: int, B: int, H: int, D: int, capacity: int | None,
           appends, what: str) -> None:
    case = _cases.name(seed, what)
    seq = cases.sequence(g, B, H, H, sum(appends), D)
    plan = Plan()
    plan.new("c", capacity=capacity)
    steps = _cases.attend_after_each_chunk(plan, seq, appends, noncontiguous=True)
    results = _cases.run(candidate, plan, case)

    got = _cases.outputs(results, steps, (B, H, 1, D), case)
    require_close(got, [_cases.newest(seq, end) for _, end in steps], TOL, case=case,
                  step_name="append", first_step=1)
