"""Hidden eviction: seeded random scripts of adds, admits, forks, appends, frees and evicts.

Every evict must return the id the judge's book gives (the most recently added sequence still
present, adding by add, admit or fork, in call order), and num_free_blocks must grow by the
victim's blocks when none of them was ever shared. At the end the cache is evicted until empty,
and one more evict raises ValueError. The pool is large and admits ask for at most two blocks,
so no admission question decides who is present. Block sizes 1 and 16.
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.hidden.paged_free import play
from graders.items.eviction import HINTS
from graders.items.paged_cow import Session

ITEM = "eviction"

CASES = [(_cases.BASE_SEED + 5600 + i, bs) for i, bs in enumerate((16, 1, 16, 1))]
WEIGHTS = {"add": 2, "admit": 1, "append": 3, "fork": 1, "free": 1, "evict": 2}


def grade(candidate: Candidate) -> str:
    for seed, block_size in CASES:
        case = _cases.name(seed, f"random adds, admits, forks, frees and evicts, "
                                 f"block_size {block_size}")
        s = Session(case, 512, block_size, seed=seed, hidden=True, watch=("freed",))
        play(s, cases.generator(seed), 40, WEIGHTS, 20, most_admitted=2 * block_size)
        for _ in range(len(s.book.tables) + 1):  # until empty, then one more: ValueError
            s.evict()
        s.check(_cases.run(candidate, s.plan, case), HINTS)
    return (f"{len(CASES)} random scripts: every evict took the newest sequence still present "
            "and gave its blocks back; ValueError once empty")
