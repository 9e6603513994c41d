"""paged-free: no leaked or double-freed block; CacheFull changes nothing.

Public: three scripts (pools of 4-position blocks):
- add / append / fork / free with num_free_blocks and every length read after every step: a
  fork takes no block, a write into a shared partial block takes one (its copy), a free returns
  only the blocks no one else holds, and freeing everything gives the whole pool back. A leak,
  or a block returned while a fork still holds it, shows at its step. Freeing a freed id and
  an unknown id must raise KeyError and change nothing.
- 2 blocks free, an append needing 3: CacheFull, with every block table, length, the free count
  and every sequence's attention (read just before and just after) as they were. A cache that
  takes blocks one at a time and raises when they run out leaks them; one that counts the new
  positions first has a longer sequence.
- a forked sequence whose shared partial last block must be copied, with no block free:
  CacheFull, nothing changed; a sequence whose partial block is its own still fits a token.

Every script is played on a graders.serving.session.Session, against the judge's model of the
pool (graders/serving/model.py).

Hidden: seeded random scripts (graders.serving.scripts.play) of add / append / fork / free steps,
and frees of ids that are gone or were never added, on pools small enough that many appends do
not fit (multi-block appends with a few blocks free, copy-on-write copies with none), checked
after every step as the public scripts are; at the end every sequence is freed and the whole
pool must be back. Block sizes 1 and 16. Then an int8 pool: a fork outlives its source, whose
freed blocks go to a new sequence, then forks, frees and evictions at random, every live
sequence's attention (within quantized-kv's bound) and the free count read after every step. A
free that hands out a block a fork still holds shows as the fork's data overwritten by the next
sequence to take it, even where the free count is right (one counted from the tables, say).
Hidden only, as paged-cow's int8 case: every quantization mistake would fail it too.
"""

from __future__ import annotations

from graders.judge.candidate import Candidate
from graders.serving.scripts import play
from graders.serving.session import Session
from graders.shared import cases, hidden_cases

ITEM = "paged-free"
HINTS = {
    "num_free_blocks": "a block returns to the pool exactly when its last holder frees it "
    "(reference counts), and an append takes only the blocks it needs",
    "length": "a length changes only by an append that succeeds (a fork starts at src's)",
    "tables": "tables change only as the contract says: a fork shares every block, a write into "
    "a shared partial block copies it, and an append that raises CacheFull changes none",
    "unchanged": "an append that raises CacheFull must leave every sequence's data as it was",
    "append": "count every block an append needs (a copy-on-write copy included) before "
    "touching anything, and raise CacheFull if they are not free",
    "free": "free raises KeyError for an id that is unknown or already freed, changing nothing",
    "attend": "a sequence's data stays as written while it lives: a block goes back to the pool "
    "only when its last holder frees it, so no block a fork still holds is handed to "
    "another sequence",
}
EVERYTHING = ("tables", "length", "unchanged", "num_free_blocks")

# seed, block_size, num_blocks, longest append
HIDDEN_CASES = [
    (5400 + i, bs, n, t)
    for i, (bs, n, t) in enumerate(((16, 8, 40), (1, 24, 7), (16, 6, 24), (1, 40, 12)))
]
HIDDEN_WEIGHTS = {"add": 2, "append": 7, "fork": 2, "free": 2, "free gone": 1}
SPILL_SEED = 5410
REUSE_SEED, REUSE_BLOCK_SIZE, REUSE_BLOCKS = 5420, 4, 24
REUSE_WEIGHTS = {"add": 2, "append": 6, "fork": 3, "free": 2, "evict": 1}
REUSE_WATCH = ("length", "attend", "num_free_blocks")


def grade(candidate: Candidate) -> str:
    s = Session("reference counts", 12, 4, seed=400, watch=("length", "num_free_blocks"))
    s.add("a"), s.add("b")
    s.append("a", 5), s.append("b", 3)  # a: 2 blocks (the second partial), b: 1
    s.fork("a", "c")  # c shares a's 2 blocks
    s.append("c", 2)  # a copy of the shared partial block: 1 more
    s.fork("c", "d")
    s.append("d", 5)  # a copy of c's partial block, and 1 new
    s.free("a")  # its first block is still c's and d's
    s.free("c")
    s.free("a")  # already freed: KeyError
    s.free("never added")  # unknown: KeyError
    s.free("d"), s.free("b")  # all freed: the whole pool is back
    s.add("a"), s.append("a", 9)  # the id can be used again
    s.free("a")
    s.check(candidate.run(s.plan), HINTS)

    s = Session("an append needing 3 blocks with 2 free", 6, 4, seed=401, watch=EVERYTHING)
    s.add("x"), s.add("y")
    s.append("x", 6), s.append("y", 8)  # 2 blocks each: 2 left
    s.append("x", 11)  # positions 6..16 need 3 more blocks: CacheFull
    s.append("x", 2)  # fits in x's partial block
    s.append("y", 5)  # 2 blocks: exactly what is left
    s.append("x", 1)  # x's last block is full, the pool empty: CacheFull
    s.check(candidate.run(s.plan), HINTS)

    s = Session("a copy-on-write copy with no free block", 3, 4, seed=402, watch=EVERYTHING)
    s.add("p"), s.append("p", 6)  # 2 blocks, the second partial
    s.fork("p", "q")
    s.add("r"), s.append("r", 1)  # the last free block
    s.append("q", 1)  # must copy the shared partial block first: CacheFull
    s.append("r", 3)  # r's partial block is its own: fits with 0 free
    s.free("r")
    s.append("q", 1)  # now the copy fits
    s.append("p", 2)  # p alone holds its partial block again: in place
    s.check(candidate.run(s.plan), HINTS)

    return (
        "free counts exact after every add, append, fork and free; the whole pool back; "
        "KeyError on unknown and double frees; CacheFull (multi-block and copy-on-write) "
        "changes no length, table, count or data"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, block_size, num_blocks, longest in hidden_cases.seeded(HIDDEN_CASES):
        case = hidden_cases.name(
            seed, f"a small pool: random adds, appends, forks and frees, block_size {block_size}"
        )
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True, watch=EVERYTHING)
        play(s, cases.generator(seed), 40, HIDDEN_WEIGHTS, longest)
        for seq in list(s.book.tables):
            s.free(seq)
        s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    _cow_spill(candidate, hidden_cases.seed(SPILL_SEED))
    seed = hidden_cases.seed(REUSE_SEED)
    case = hidden_cases.name(
        seed,
        "an int8 pool: a fork outliving its source, then random forks, "
        "frees and evictions, every live sequence's attention read "
        "after each step",
    )
    g = cases.generator(seed)
    s = Session(
        case,
        REUSE_BLOCKS,
        REUSE_BLOCK_SIZE,
        seed=seed,
        hidden=True,
        watch=REUSE_WATCH,
        quantize="int8",
    )
    s.add("a"), s.append("a", REUSE_BLOCK_SIZE * cases.randint(g, 1, 2) + cases.randint(g, 1, 3))
    s.fork("a", "b")  # shares every block of a
    s.free("a")  # returns none of them: b holds them all
    s.add("c"), s.append("c", cases.randint(g, 6, 12))  # blocks from the pool, none of b's
    play(s, g, 40, REUSE_WEIGHTS, 9, drop_full=True)
    s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    return (
        f"{len(HIDDEN_CASES) + 2} random scripts on small pools: free counts, tables and "
        "lengths exact at every step, CacheFull changes nothing, the whole pool back at the "
        "end; in an int8 pool, every live sequence's data intact as blocks are reused"
    )


def _cow_spill(candidate: Candidate, seed: int) -> None:
    """An append to a fork's shared partial block that also spills into new blocks, with room
    for the copy or the growth but not both: CacheFull, and nothing taken. Random scripts meet
    this only by chance; here its sizes are drawn, its shape is not."""
    g = cases.generator(seed)
    bs, free = cases.randint(g, 2, 6), cases.randint(g, 1, 3)
    t = free * bs + cases.randint(g, 0, bs - 1)  # needs `free` new blocks and the copy
    case = hidden_cases.name(
        seed,
        f"block_size {bs}: an append to a fork's shared partial block "
        f"that also spills into new blocks, {free} free",
    )
    s = Session(case, 2 + free, bs, seed=seed, hidden=True, watch=EVERYTHING)
    s.add("p"), s.append("p", bs + 1)  # one full block and a partial one
    s.fork("p", "q")  # q shares both
    s.append("q", t)  # the copy and `free` new blocks: CacheFull
    s.append("q", 1)  # the copy alone fits
    s.free("q"), s.free("p")
    s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
