"""eviction: evict() frees the most recently added sequence still present, and its blocks.

Recompute-style preemption gives up the request that has done the least work: the newest.
Public: one pool of 64 blocks of 4 positions; sequences come in by add, by admit, and as fork's
dst (all three count as adding, in call order, as the starter's docstrings say), some are freed
by hand, an admit is refused (it adds nothing), and evictions are interleaved with new
additions. Each evict must return the id the judge's model of the pool gives
(graders/serving/model.py), the id must be gone afterwards (add takes it again), and
num_free_blocks must grow by the blocks the victim held, checked for victims none of whose
blocks was ever shared (what happens to shared blocks is paged-cow's and paged-free's question).
With nothing left, evict raises ValueError.
The ids are not in alphabetical order of adding, so a cache that evicts the oldest, the largest
id, or an id it already freed, returns a wrong one at some step; one that drops the sequence but
not its blocks shows in the free count.

Hidden: seeded random scripts of adds, admits, forks, appends, frees and evicts
(graders.serving.scripts.play), block sizes 1 and 16, then evicts until the cache is empty and
one more (ValueError). The pool is large and admits ask for at most two blocks, so no admission
question decides who is present.
"""

from __future__ import annotations

from graders.judge.candidate import Candidate
from graders.serving.scripts import play
from graders.serving.session import Session
from graders.shared import cases, hidden_cases

ITEM = "eviction"

HINTS = {
    "evict": "evict takes the most recently added sequence still present (add, admit and fork's "
    "dst all add; freed or evicted ones are gone), and raises ValueError when none is",
    "freed": "evicting a sequence frees it: its blocks go back to the pool",
    "add": "an evicted sequence is gone, like a freed one: its id can be added again",
}

HIDDEN_CASES = [(5600 + i, bs) for i, bs in enumerate((16, 1, 16, 1))]
HIDDEN_WEIGHTS = {"add": 2, "admit": 1, "append": 3, "fork": 1, "free": 1, "evict": 2}


def grade(candidate: Candidate) -> str:
    s = Session("interleaved adds, admits, forks and frees", 64, 4, seed=600, watch=("freed",))
    s.add("m"), s.append("m", 5)
    s.admit("c", 12), s.append("c", 3)
    s.add("x"), s.append("x", 4)
    s.fork("m", "k"), s.append("k", 2)  # k is added after c and x
    s.free("x")
    s.admit("a", 8), s.append("a", 1)
    s.admit("zz", 1000)  # refused: 250 blocks; zz is never added
    s.evict()  # a
    s.add("b"), s.append("b", 6)
    s.evict()  # b
    s.evict()  # k (it still shares m's first block)
    s.add("n")
    s.evict()  # n, empty
    s.add("k")  # gone, so the id is free again
    s.evict(), s.evict(), s.evict()  # k, c, then m
    s.evict()  # nothing left: ValueError
    s.add("m"), s.append("m", 1)  # a new m
    s.evict()
    s.check(candidate.run(s.plan), HINTS)
    return (
        "evict returned the newest sequence still present at every step (add, admit, fork), "
        "gave its blocks back, and raised ValueError on an empty cache"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, block_size in hidden_cases.seeded(HIDDEN_CASES):
        case = hidden_cases.name(
            seed, f"random adds, admits, forks, frees and evicts, block_size {block_size}"
        )
        s = Session(case, 512, block_size, seed=seed, hidden=True, watch=("freed",))
        play(s, cases.generator(seed), 40, HIDDEN_WEIGHTS, 20, most_admitted=2 * block_size)
        for _ in range(len(s.book.tables) + 1):  # until empty, then one more: ValueError
            s.evict()
        s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    return (
        f"{len(HIDDEN_CASES)} random scripts: every evict took the newest sequence still "
        "present and gave its blocks back; ValueError once empty"
    )
