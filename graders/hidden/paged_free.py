"""Hidden paged-free: seeded random scripts on small pools, where CacheFull happens often.

Each case plays add / append / fork / free steps, and frees of ids that are gone or were never
added, on a pool small enough that many appends do not fit (multi-block appends with a few
blocks free, copy-on-write copies with none). After every step the block tables (their sharing),
every length and num_free_blocks must be the judge's book's (graders/items/paged_free.py);
around every append that must raise CacheFull, every sequence's attention must be what it was.
At the end every sequence is freed and the whole pool must be back. Block sizes 1 and 16.

This file also holds `play`, the seeded script of every hidden case of the pool's bookkeeping
(paged-cow, paged-free, admission, eviction).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.paged_session import Session
from graders.items.paged_free import HINTS

ITEM = "paged-free"

# seed, block_size, num_blocks, longest append
CASES = [(_cases.BASE_SEED + 5400 + i, bs, n, t)
         for i, (bs, n, t) in enumerate(((16, 8, 40), (1, 24, 7), (16, 6, 24), (1, 40, 12)))]
WEIGHTS = {"add": 2, "append": 7, "fork": 2, "free": 2, "free gone": 1}


def grade(candidate: Candidate) -> str:
    for seed, block_size, num_blocks, longest in CASES:
        case = _cases.name(seed, f"a small pool: random adds, appends, forks and frees, "
                                 f"block_size {block_size}")
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True,
                    watch=("tables", "length", "unchanged", "num_free_blocks"))
        play(s, cases.generator(seed), 40, WEIGHTS, longest)
        for seq in list(s.book.tables):
            s.free(seq)
        s.check(_cases.run(candidate, s.plan, case), HINTS)
    return (f"{len(CASES)} random scripts on small pools: free counts, tables and lengths exact "
            "at every step, CacheFull changes nothing, the whole pool back at the end")


def play(s: Session, g: torch.Generator, steps: int, weights: dict[str, int], longest: int,
         most_admitted: int = 0, drop_full: bool = False) -> None:
    """`steps` seeded steps on `s`, each of a kind drawn by `weights`, with arguments drawn from
    the book's state (never from the candidate's outputs).

    Kinds: add, admit (max_tokens up to `most_admitted`), can_admit, append (1 to `longest`
    positions), fork, free, "free gone" (an id freed before, or never added), evict. An admitted
    sequence appends only within its max_tokens and is never forked: the contract leaves open
    what a fork does to a reservation, and what growth past max_tokens may take. `drop_full`:
    a sequence whose append raised CacheFull is freed right away, so that whatever a wrong
    CacheFull left behind is gone before the next question.
    """
    made, budget = [], {}  # ids made so far; admitted sequence -> its max_tokens

    def new() -> int:
        made.append(len(made) + 1)
        return made[-1]

    kinds = tuple(kind for kind, weight in weights.items() for _ in range(weight))
    for _ in range(steps):
        kind, book = _cases.choice(g, kinds), s.book
        present = tuple(book.tables)
        if not present and kind in ("append", "fork", "free"):
            kind = "add"  # nothing to act on yet
        seq = _cases.choice(g, present) if present else None
        if kind == "add":
            s.add(new())
        elif kind == "admit":
            seq, n = new(), _cases.randint(g, 1, most_admitted)
            s.admit(seq, n)
            if seq in book.tables:
                budget[seq] = n
        elif kind == "can_admit":
            s.can_admit(_cases.randint(g, 1, most_admitted))
        elif kind == "append":
            room = budget.get(seq, book.lengths[seq] + longest) - book.lengths[seq]
            full = room and s.append(seq, _cases.randint(g, 1, min(room, longest))) == (
                "raises", "CacheFull")
            if full and drop_full:
                s.free(seq)  # a scheduler drops (to recompute later) a request that does not fit
        elif kind == "fork" and seq not in budget:
            s.fork(seq, new())
        elif kind == "free":
            s.free(seq)
        elif kind == "free gone":
            gone = tuple(i for i in made if i not in book.tables)
            s.free(_cases.choice(g, gone) if gone else 0)  # 0: never added
        elif kind == "evict":
            s.evict()
        for seq in [seq for seq in budget if seq not in book.tables]:
            del budget[seq]
