"""paged-free: no leaked or double-freed block; CacheFull changes nothing.

Also the judge's own account of a pool (`Book`, `Session`), which every serving-track item of
the same family (paged-cow, admission, eviction, and their hidden cases) runs its scripts
against: each step is done to the candidate's cache and to the book, which keeps block tables of
the judge's own block names, holder counts, reservations and the order of adding, straight from
the contract (section 4). Expected free counts, outcomes and outputs come from the book, never
from the candidate.

The cases. A script of add / append / fork / free with num_free_blocks read after every step:
a fork shares its blocks, a write into a shared partial block takes one block for its copy, a
free returns only the blocks no one else holds, and everything freed gives the whole pool back;
a leak or a block returned twice shows at the step it happens. Freeing an unknown id and freeing
twice must raise KeyError and return nothing. Then a pool with 2 free blocks gets an append that
needs 3: CacheFull, with length, block tables, free count and every sequence's attention as
before (a cache that takes blocks one at a time and raises when they run out leaks them; one
that bumps the length first shows it). A sequence whose shared partial last block must be copied
gets CacheFull when no block is free, while an unshared partial block still takes one more
token with the pool empty.
"""

from __future__ import annotations

from graders.candidate import Candidate
from graders.items.paged_cow import Session

ITEM = "paged-free"

HINTS = {
    "free": "a block returns to the pool exactly when its last holder frees it (reference "
            "counts), and an append takes only the blocks it needs",
    "length": "an append that raises CacheFull must not change anything",
    "tables": "an append that raises CacheFull must not change any block table",
    "attend": "an append that raises CacheFull must leave every sequence's data as it was",
    "append": "count every block an append needs (a copy-on-write copy included) before "
              "touching anything, and raise CacheFull if they are not free",
    "free()": "free raises KeyError for an id that is unknown or already freed, and changes "
              "nothing then",
}


def grade(candidate: Candidate) -> str:
    # Reference counts: 12 blocks of 4 positions.
    s = Session("refcounts", 12, 4, seed=400, watch=("free", "lengths"))
    s.add("a"), s.add("b")
    s.append("a", 5), s.append("b", 3)  # a: 2 blocks (the second partial), b: 1
    s.fork("a", "c")                    # c shares a's 2 blocks
    s.append("c", 2)                    # copy of the shared partial block: 1 more
    s.fork("c", "d")
    s.append("d", 5)                    # copy of c's partial block, and 1 new
    s.free("a")                         # its first block is still c's and d's
    s.free("c")
    s.free("a")                         # already freed: KeyError
    s.free("never added")               # unknown: KeyError
    s.free("d"), s.free("b")            # all freed: the whole pool is back
    s.add("a")                          # the id can be used again
    s.append("a", 9)
    s.free("a")
    s.check(candidate.run(s.plan), HINTS)

    # CacheFull in the middle of a multi-block append: 6 blocks, 2 free, 3 needed.
    s = Session("an append needing 3 blocks with 2 free", 6, 4, seed=401,
                watch=("free", "lengths", "tables", "attend"))
    s.add("x"), s.add("y")
    s.append("x", 6), s.append("y", 8)  # x: 2 blocks, y: 2: 2 blocks left
    s.append("x", 11)                   # positions 6..16 need blocks 3, 4, 5: CacheFull
    s.append("x", 2)                    # fits in x's partial block
    s.append("y", 5)                    # 2 blocks: exactly what is left
    s.append("y", 1)                    # the pool is empty: CacheFull
    s.check(candidate.run(s.plan), HINTS)

    # Copy-on-write with an empty pool: 3 blocks.
    s = Session("a copy-on-write copy with no free block", 3, 4, seed=402,
                watch=("free", "lengths", "tables", "attend"))
    s.add("p"), s.append("p", 6)        # 2 blocks, the second partial
    s.fork("p", "q")
    s.add("r"), s.append("r", 1)        # the last free block
    s.append("q", 1)                    # must copy p's partial block first: CacheFull
    s.append("r", 3)                    # r's partial block is its own: fits with 0 free
    s.free("r")
    s.append("q", 1)                    # now the copy fits
    s.append("p", 2)                    # p alone holds its partial block again: in place
    s.check(candidate.run(s.plan), HINTS)
    return ("free counts exact after every add, append, fork and free; whole pool back; "
            "KeyError on unknown and double frees; CacheFull (multi-block and copy-on-write) "
            "changes no length, table, count or data")
