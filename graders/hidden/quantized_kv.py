"""Hidden quantized-kv: more pool shapes, long and fragmented int8 pools, other growth patterns.

- Memory: seeded pools of head_dim 64 and 128 with random num_blocks, block_size and kv_heads:
  the int8 pool at most 0.3x the float32 one each time.
- Accuracy (the public BOUND, measured on these cases too: see graders/items/quantized_kv.py):
  seeded workloads, block sizes 1, 3 and 16, random head layouts, head_dim 16 to 128, sequences
  interleaved and one freed midway (its blocks reused, with their old scales), every other append
  non-contiguous, one sequence holding an all-zero token (absmax 0: whatever its scale, it must
  come back as zeros, never NaN from 0 / 0), and one grown to a few hundred positions.
- Growth: a ramp from magnitude 1 to 100 over 40 single-token appends into blocks of 16 (every
  block's later slots are larger than its first), and a jump of 100x in the middle of a block of
  3 (each block's first token the largest until then), queries scaled down as the keys grow.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Plan
from graders.hidden import _cases
from graders.items.paged_equivalence import Pool
from graders.items.quantized_kv import BOUND, MAX_RATIO, check, memory

ITEM = "quantized-kv"

LAYOUTS = ((2, 2), (4, 4), (8, 2), (4, 1))
MEMORY_SEEDS = [_cases.BASE_SEED + 5200 + i for i in range(2)]
ACCURACY = [(_cases.BASE_SEED + 5210 + i, bs) for i, bs in enumerate((1, 3, 16))]
GROWTH_SEED = _cases.BASE_SEED + 5220


def grade(candidate: Candidate) -> str:
    for seed, D in zip(MEMORY_SEEDS, (64, 128)):
        g = cases.generator(seed)
        shape = (_cases.randint(g, 8, 64), _cases.choice(g, (1, 3, 16)), _cases.randint(g, 1, 8))
        case = _cases.name(seed, f"a pool of head_dim {D}")
        with _cases.labelled(case):
            memory(candidate, *shape, D, case)
    for seed, bs in ACCURACY:
        _workload(candidate, seed, bs)
    _growth(candidate)
    return (f"pools of head_dim 64 and 128 within {MAX_RATIO}x; {len(ACCURACY)} seeded int8 "
            f"workloads and 2 growth patterns within {BOUND:.0e} of the values' magnitude")


def _workload(candidate: Candidate, seed: int, bs: int) -> None:
    g = cases.generator(seed)
    (Hq, Hkv), D = _cases.choice(g, LAYOUTS), _cases.choice(g, (16, 64, 128))
    case = _cases.name(seed, f"an int8 workload, block_size {bs}, {Hq}/{Hkv} heads, head_dim {D}")
    plan = Plan()
    pool = Pool(plan, g, 400 // bs + 8, bs, Hq, Hkv, D, quantize="int8")
    for s in (0, 1, 2):
        pool.add(s)
    for n in range(14):
        if n == 6:  # sequence 1 ends; sequence 3 reuses its blocks
            pool.free(1)
            pool.add(3)
        live = list(pool.seqs)
        s = live[n % len(live)]
        t = _cases.randint(g, 20, 40) if s == 0 else _cases.randint(g, 1, 2 * bs + 2)
        key, value = pool.kv(t), pool.kv(t)
        if n == 5:  # sequence 2's second append ends with a token whose K and V are all zeros
            key[:, -1], value[:, -1] = 0.0, 0.0
        pool.append(s, key, value, noncontiguous=bool(n % 2))
        pool.attend([x for x in pool.seqs if pool.seqs[x][0].shape[1]], f"append {n + 1}")
    check(_cases.run(candidate, plan, case), {case: (pool, None)})


def _growth(candidate: Candidate) -> None:
    g = cases.generator(GROWTH_SEED)
    plan, pools = Plan(), {}
    for obj, bs, magnitude, onset, what in (
            ("ramp", 16, 100.0 ** (torch.arange(40) / 39), 1, "a ramp from 1 to 100"),
            ("jump", 3, torch.tensor([2.0, 1, 1] * 2 + [2.0] + [100.0] * 14), 7,
             "a jump of 100x in the middle of a block")):
        pool = Pool(plan, g, 64 // bs + 2, bs, 4, 2, 32, obj=obj, quantize="int8")
        pool.add(0)
        for p, m in enumerate(magnitude.double()):
            pool.append(0, pool.kv(1, m[None]), pool.kv(1, m[None]))
            pool.attend([0], f"token {p}", q_scale=1 / float(magnitude[: p + 1].max()))
        pools[_cases.name(GROWTH_SEED, what)] = (pool, onset)
    check(_cases.run(candidate, plan, _cases.name(GROWTH_SEED, "growth")), pools)
