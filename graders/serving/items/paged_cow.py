"""paged-cow: fork shares blocks; a write copies a shared block first; branches never mix.

Public: three scripts (12 blocks of 4 positions; after every step the block tables, lengths, every
sequence's attention against float64 over its own history, and num_free_blocks):
- a fork of a sequence of 6 positions: no block taken, the same table. Then each side writes:
  the first writer into the shared partial block gets a copy in its last entry only (one block
  from the pool); the other then writes in place (its block is no longer shared). A fork that
  copies everything, a write into a shared block without a copy (the other branch sees it), or
  a copy whose old block keeps its count (a leak) each show at their step.
- a fork at a block boundary (8 positions): the writes take new blocks; full blocks stay shared.
- forks of forks, every branch writing into partial and full blocks, all compared.
Tables are judged by their sharing: where the judge's book has one block in two places, the
candidate's ids must be equal; where it has two blocks, different (any ids will do). The keys
written are zero, so attention is the mean of exactly the values a branch holds: this item
judges which data a branch reads, not how attention computes (paged-equivalence's question).
Every script is played on a graders.serving.session.Session, against the judge's model of the pool
(graders/serving/model.py).

Hidden: seeded random trees of forks (graders.serving.scripts.play: adds, appends of 1 to 20
positions, forks of random sequences, forks of forks and of empty sequences, mid-block and at
block boundaries) on a pool large enough that nothing runs out, checked after every step as the
public scripts are. Block size 1 (never a partial block: forks only share) and 16 (writes into
shared partial blocks copy them). Then an int8 pool (quantize="int8"; quantized-kv never forks,
these never quantized): a fork of a sequence that ends mid-block and a write into the fork, so
that the shared partial block is copied (its int8 keys and values and their scales: a copy that
forgets the scales gives the copied positions another block's), then a random tree of forks
with frees and evictions among them, so that copies land in blocks freed before, whose stale
scales are not the copied block's. The int8 pool's attention is held to quantized-kv's bound
(2e-2 of a sequence's largest value) instead of float32's tolerance. Hidden only: every
quantization mistake would fail it too, and those are quantized-kv's to name.
"""

from __future__ import annotations

from graders.judge.candidate import Candidate
from graders.serving.scripts import play
from graders.serving.session import INT8_BOUND, TOL, Session
from graders.shared import cases, hidden_cases

ITEM = "paged-cow"
HINTS = {
    "num_free_blocks": "a fork takes no block; a write into a shared partial block takes one "
    "(its copy) and the old block loses a holder; full blocks are never copied",
    "tables": "fork gives dst src's own block ids; a write into a shared partial last block "
    "replaces that one entry with a copy",
    "attend": "a branch sees only its own writes. The tables were right at this step, so the "
    "data went into another block than the table's (into the shared block, not its "
    "copy?), or attend reads other blocks than the table's (see paged-block-table)",
    "attend:False": "this is before any fork: attention itself is off (see paged-equivalence), "
    "and this item's checks rely on it",
    "attend:int8:True": "in an int8 pool a block is its int8 keys and values and their scales: "
    "a copy-on-write copy copies all four, or the copied positions come "
    "back at another block's scale",
    "length": "a fork starts at src's length; then each branch counts its own appends",
}

# seed, block_size, num_blocks
HIDDEN_CASES = [(5300 + i, bs, n) for i, (bs, n) in enumerate(((16, 96), (1, 600), (16, 96)))]
HIDDEN_WEIGHTS = {"add": 1, "append": 6, "fork": 3}
INT8_SEED, INT8_BLOCK_SIZE, INT8_BLOCKS = 5310, 4, 160
INT8_WEIGHTS = {"add": 1, "append": 6, "fork": 3, "free": 1, "evict": 1}


def grade(candidate: Candidate) -> str:
    s = Session("a fork, then writes on both sides", 12, 4, seed=300)
    s.add("a"), s.append("a", 6)  # one full block, one holding 2 of 4 positions
    s.fork("a", "b")  # shares both blocks: no block taken
    s.append("b", 1)  # b copies the partial block: its last entry changes
    s.append("a", 1)  # a alone holds that block now: written in place
    s.append("a", 2), s.append("b", 3)
    s.check(candidate.run(s.plan), HINTS)

    s = Session("a fork at a block boundary", 12, 4, seed=301)
    s.add("c"), s.append("c", 8)
    s.fork("c", "d")
    s.append("d", 3), s.append("c", 5)  # new blocks; both full blocks stay shared
    s.check(candidate.run(s.plan), HINTS)

    s = Session("forks of forks, every branch writing", 12, 4, seed=302)
    s.add("r"), s.append("r", 5)
    s.fork("r", "x"), s.fork("x", "y")  # three holders of r's 2 blocks
    s.append("y", 2), s.append("x", 3), s.append("r", 4)
    s.fork("y", "z")
    s.append("z", 1), s.append("y", 9)
    s.fork("r", "w")
    s.append("w", 3), s.append("r", 3), s.append("x", 1)
    s.check(candidate.run(s.plan), HINTS)

    return (
        f"3 fork scripts: no block taken by a fork, one per copy of a shared partial block, "
        f"full blocks stay shared, every branch within {TOL} of its own history"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, block_size, num_blocks in hidden_cases.seeded(HIDDEN_CASES):
        case = hidden_cases.name(
            seed, f"a random tree of forks, every branch writing, block_size {block_size}"
        )
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True)
        play(s, cases.generator(seed), 40, HIDDEN_WEIGHTS, 20)
        s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    seed = hidden_cases.seed(INT8_SEED)
    case = hidden_cases.name(
        seed,
        f"an int8 pool: a fork written mid-block, then a random tree "
        f"of forks with frees and evictions, block_size "
        f"{INT8_BLOCK_SIZE}",
    )
    g = cases.generator(seed)
    s = Session(case, INT8_BLOCKS, INT8_BLOCK_SIZE, seed=seed, hidden=True, quantize="int8")
    s.add("a"), s.append("a", INT8_BLOCK_SIZE * cases.randint(g, 1, 3) + cases.randint(g, 1, 3))
    s.fork("a", "b")
    s.append("b", cases.randint(g, 1, 6))  # copies the shared partial block
    play(s, g, 40, INT8_WEIGHTS, 10)
    s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    return (
        f"{len(HIDDEN_CASES) + 1} random fork trees (one in an int8 pool, with frees and "
        "evictions): blocks shared and copied as the contract says, every branch within "
        f"{TOL} of its own history (int8: within {INT8_BOUND:.0e} of its largest value)"
    )
