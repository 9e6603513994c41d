"""Hidden paged-cow: seeded random trees of forks, every branch writing.

Each case plays adds, appends of 1 to 20 positions and forks of random sequences (forks of
forks, forks of empty sequences, forks taken mid-block and at block boundaries) on a pool large
enough that nothing runs out. After every step: the block tables must share exactly the blocks
the judge's book shares (graders/items/paged_free.py), lengths and num_free_blocks must be the
book's, and every sequence's attention must equal float64 attention over its own history, so a
write that reaches another branch, a copy of a full block, or a missing copy shows at its step.
Block size 1 (never a partial block: forks only share) and 16 (writes into shared partial
blocks copy them).
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.hidden.paged_free import play
from graders.items.paged_cow import HINTS, TOL
from graders.paged_session import Session

ITEM = "paged-cow"

# seed, block_size, num_blocks
CASES = [(_cases.BASE_SEED + 5300 + i, bs, n) for i, (bs, n) in enumerate(((16, 96), (1, 600),
                                                                            (16, 96)))]
WEIGHTS = {"add": 1, "append": 6, "fork": 3}


def grade(candidate: Candidate) -> str:
    for seed, block_size, num_blocks in CASES:
        case = _cases.name(seed, f"a random tree of forks, every branch writing, "
                                 f"block_size {block_size}")
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True)
        play(s, cases.generator(seed), 40, WEIGHTS, 20)
        s.check(_cases.run(candidate, s.plan, case), HINTS)
    return (f"{len(CASES)} random fork trees: blocks shared and copied as the contract says, "
            f"every branch within {TOL} of its own history")
