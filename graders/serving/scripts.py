"""Seeded random scripts for the serving items' hidden cases.

`play` draws bookkeeping scripts (add, admit, can_admit, append, fork, free, evict) onto a
`graders.serving.session.Session`, reading the arguments from the session's book; `workload`
draws the add / append / free scripts that paged-equivalence plays on a `graders.serving.pool.Pool`,
and `peak_blocks` sizes a pool for one. Every choice comes from the seed's generator, never from
the candidate's outputs, so a case replays exactly.
"""

from __future__ import annotations

import math

import torch

from graders.serving.session import Session
from graders.shared import cases


def play(
    s: Session,
    g: torch.Generator,
    steps: int,
    weights: dict[str, int],
    longest: int,
    most_admitted: int = 0,
    drop_full: bool = False,
) -> None:
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
        kind, book = cases.choice(g, kinds), s.book
        present = tuple(book.tables)
        if not present and kind in ("append", "fork", "free"):
            kind = "add"  # nothing to act on yet
        seq = cases.choice(g, present) if present else None
        if kind == "add":
            s.add(new())
        elif kind == "admit":
            seq, n = new(), cases.randint(g, 1, most_admitted)
            s.admit(seq, n)
            if seq in book.tables:
                budget[seq] = n
        elif kind == "can_admit":
            s.can_admit(cases.randint(g, 1, most_admitted))
        elif kind == "append":
            room = budget.get(seq, book.lengths[seq] + longest) - book.lengths[seq]
            full = room and s.append(seq, cases.randint(g, 1, min(room, longest))) == (
                "raises",
                "CacheFull",
            )
            if full and drop_full:
                s.free(seq)  # a scheduler drops (to recompute later) a request that does not fit
        elif kind == "fork" and seq not in budget:
            s.fork(seq, new())
        elif kind == "free":
            s.free(seq)
        elif kind == "free gone":
            gone = tuple(i for i in made if i not in book.tables)
            s.free(cases.choice(g, gone) if gone else 0)  # 0: never added
        elif kind == "evict":
            s.evict()
        for seq in [seq for seq in budget if seq not in book.tables]:
            del budget[seq]


def workload(g: torch.Generator, events: int, most: int) -> list[tuple]:
    """Random adds, appends (most of the events) and frees, as (op, seq[, t]): at most 6
    sequences at a time, appends of 1 to `most` positions."""
    script, live, next_id = [], [], 10
    for _ in range(events):
        r = cases.randint(g, 0, 9)
        if not live or (r == 0 and len(live) < 6):
            script.append(("add", next_id))
            live.append(next_id)
            next_id += 1
        elif r == 1 and len(live) > 1:
            script.append(("free", live.pop(cases.randint(g, 0, len(live) - 1))))
        else:
            script.append(("append", cases.choice(g, tuple(live)), cases.randint(g, 1, most)))
    return script


def peak_blocks(script: list[tuple], block_size: int) -> int:
    """The most blocks the live sequences of `script` hold at once."""
    lengths, peak = {}, 0
    for op, s, *t in script:
        lengths[s] = lengths.get(s, 0) + (t[0] if op == "append" else 0)
        if op == "free":
            del lengths[s]
        peak = max(peak, sum(math.ceil(n / block_size) for n in lengths.values()))
    return peak
