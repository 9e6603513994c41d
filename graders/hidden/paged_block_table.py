"""Hidden paged-block-table: the scramble of the public item, drawn from seeds.

Per seed: 4, 6 or 8 sequences taking one block each in turn (twice), block sizes 1, 3 and 16,
random head layouts and head_dim, every other sequence freed in a random order, the survivors
growing over 2 or 3 rounds of random chunks (up to a few blocks at a time, so with blocks of 16
the survivors reach a hundred positions and more), appended non-contiguous, in a pool with 0 to
2 blocks to spare beyond what the workload needs. Tables, lengths and attention are checked as
in the public item; the message names the seed, never a table.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.items.paged_block_table import TOL, scrambled

ITEM = "paged-block-table"

LAYOUTS = ((2, 2), (4, 4), (8, 2), (6, 3), (4, 1))
CASES = [(_cases.BASE_SEED + 5100 + i, bs) for i, bs in enumerate((1, 3, 16, 3))]


def grade(candidate: Candidate) -> str:
    for seed, bs in CASES:
        g = cases.generator(seed)
        pairs = _cases.randint(g, 2, 4)
        Hq, Hkv = _cases.choice(g, LAYOUTS)
        D = _cases.choice(g, (8, 16))
        evens = list(range(0, 2 * pairs, 2))
        free_order = [evens[i] for i in torch.randperm(pairs, generator=g).tolist()]
        rounds = _cases.randint(g, 2, 3)
        grow = [[_cases.randint(g, 1, 3 * bs + 2) for _ in range(pairs)] for _ in range(rounds)]
        kind = "MHA" if Hq == Hkv else "MQA" if Hkv == 1 else f"GQA {Hq}/{Hkv}"
        case = _cases.name(seed, f"a scrambled pool of {2 * pairs} sequences, block_size {bs}, "
                                 f"{kind}, head_dim {D}")
        with _cases.labelled(case):
            scrambled(candidate, g, case, block_size=bs, heads=(Hq, Hkv), head_dim=D,
                      pairs=pairs, free_order=free_order, grow=grow,
                      late=_cases.randint(g, 1, 2 * bs + 1), spare=_cases.randint(g, 0, 2),
                      noncontiguous=True, hidden=True)
    return (f"{len(CASES)} seeded scrambled pools (block sizes 1, 3, 16): tables in position "
            f"order and disjoint, attention within {TOL}")
