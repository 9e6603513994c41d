"""Hidden admission: seeded random scripts of admits, adds, appends, can_admit and frees.

Every admit and can_admit answer, and whether each append fits or raises CacheFull, must be
the judge's book's (graders/items/paged_free.py): a request fits when ceil(max_tokens /
block_size) blocks are free beyond what admitted sequences are still promised; admitted
sequences grow within their max_tokens and never get CacheFull; sequences added without
admission get CacheFull rather than take promised blocks (and are then freed, as a scheduler
drops a request that does not fit: whether CacheFull changed nothing is paged-free's question);
free gives back what was left of a reservation. Block sizes 1 and 16, pools small enough that
refusals are frequent.
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.hidden.paged_free import play
from graders.items.admission import HINTS
from graders.paged_session import Session

ITEM = "admission"

# seed, block_size, num_blocks, longest append, largest max_tokens
CASES = [(_cases.BASE_SEED + 5500 + i, *shape) for i, shape in
         enumerate(((16, 12, 40, 80), (1, 40, 8, 24), (16, 20, 20, 200), (1, 24, 6, 16)))]
WEIGHTS = {"admit": 3, "add": 1, "append": 6, "can_admit": 2, "free": 2}


def grade(candidate: Candidate) -> str:
    for seed, block_size, num_blocks, longest, most in CASES:
        case = _cases.name(seed, f"random admits, appends and frees, block_size {block_size}")
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True, watch=())
        play(s, cases.generator(seed), 50, WEIGHTS, longest, most_admitted=most,
             drop_full=True)
        s.check(_cases.run(candidate, s.plan, case), HINTS)
    return (f"{len(CASES)} random scripts: every admit and can_admit answer, and every append's "
            "CacheFull or not, as outstanding reservations say")
