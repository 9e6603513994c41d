"""paged-block-table: block tables list blocks in position order, and attention follows them.

A deliberately scrambled pool: a control sequence takes 3 blocks in one append (contiguous, in
order); six sequences then take one block each in turn, twice (so each holds two blocks far
apart); every other one is freed, in a shuffled order; the survivors grow in turns, taking the
freed blocks back in whatever order the allocator hands them out, so tables end up like
[4, 10, 11, 5]; then an empty sequence and a late one. The pool is sized so that the survivors
must reuse freed blocks. After each phase, for every live sequence: length() is right,
block_table() has ceil(length / block_size) ids, each in range, none repeated, no block in two
tables. After each round of growth, attention of every live sequence equals float64 attention
over its own positions (MHA: head mapping is paged-equivalence's concern).

Attention is the same for any order of whole blocks, so reading blocks in id order (a sorted
table) only shows where the partly filled last block is not the highest id: the survivors' last
blocks are partial and recycled. Reading blocks table[0], table[0] + 1, ... (contiguous blocks
assumed) reads other sequences' data. Both leave the control sequence right, which is how the
message tells them from a mistake in attention itself.
"""

from __future__ import annotations

import math

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan
from graders.compare import TOLERANCE, close
from graders.items.paged_equivalence import Pool

ITEM = "paged-block-table"

CONTROL, EMPTY, LATE = 100, 99, 101
TOL = TOLERANCE[torch.float32]


def grade(candidate: Candidate) -> str:
    scrambled(candidate, cases.generator(700), "a scrambled pool", block_size=4, heads=(2, 2),
              head_dim=8, pairs=3, free_order=(4, 0, 2), grow=((5, 3, 6), (2, 4, 3)), late=5)
    return ("a scrambled pool (freed blocks reused out of order): tables in position order, "
            f"ceil(length / block_size) ids each, disjoint; attention within {TOL}")


def scrambled(candidate: Candidate, g, case: str, *, block_size: int, heads: tuple[int, int],
              head_dim: int, pairs: int, free_order, grow, late: int, spare: int = 0,
              noncontiguous: bool = False, hidden: bool = False) -> None:
    """Run the scramble described above with 2 * pairs sequences and check it."""
    bs, K = block_size, 2 * pairs
    survivors = [i for i in range(K) if i not in free_order]
    final = {i: 2 * bs + sum(r[j] for r in grow) for j, i in enumerate(survivors)}
    blocks = 3 + sum(math.ceil(n / bs) for n in final.values()) + math.ceil(late / bs)
    num_blocks = max(3 + 2 * K, blocks) + spare  # tight: the survivors must reuse freed blocks
    plan = Plan()
    pool = Pool(plan, g, num_blocks, bs, *heads, head_dim)
    checkpoints = []  # (when, {seq: (its length, length() op, block_table() op)})

    def checkpoint(when: str, attend: list | None = None) -> None:
        checkpoints.append((when, {s: (pool.seqs[s][0].shape[1], plan.call("p", "length", s),
                                       plan.call("p", "block_table", s)) for s in pool.seqs}))
        if attend:
            pool.attend(attend, when)

    pool.add(CONTROL)
    pool.append(CONTROL, t=3 * bs - 1)
    for i in range(K):
        pool.add(i)
    for _ in range(2):
        for i in range(K):
            pool.append(i, t=bs, noncontiguous=noncontiguous)
    checkpoint("one block each in turn, twice")
    for i in free_order:
        pool.free(i)
    checkpoint("freeing every other sequence")
    for r, chunks in enumerate(grow):
        for i, t in zip(survivors, chunks):
            pool.append(i, t=t, noncontiguous=noncontiguous)
        checkpoint(f"growth round {r + 1}", [CONTROL] + survivors)
    pool.add(EMPTY)
    pool.add(LATE)
    pool.append(LATE, t=late)
    checkpoint("an empty and a late sequence were added", [CONTROL] + survivors + [LATE])
    results = candidate.run(plan)
    for when, seqs in checkpoints:
        _check_tables(results, seqs, bs, num_blocks, f"{case}, after {when}")
    tables = {when: {s: results[t] for s, (_, _, t) in seqs.items()} for when, seqs in checkpoints}
    pool.check(results, TOL, case, likely=lambda p, got, step, tol: _likely(
        got[step], p.reads[step], tol, tables[p.reads[step].after], hidden))


def _check_tables(results, seqs: dict, bs: int, num_blocks: int, where: str) -> None:
    owner = {}
    for s, (n, length, table) in seqs.items():
        got, table = results[length], results[table]
        if isinstance(table, torch.Tensor) and table.dim() == 1 and not table.is_floating_point():
            table = table.tolist()
        if got != n:
            raise Fail(f"{where}: length({s}) is {got!r}, expected {n}")
        if not isinstance(table, list) or not all(type(b) is int for b in table):
            raise Fail(f"{where}: block_table({s}) is {table!r}, expected a list of ints")
        if len(table) != math.ceil(n / bs):
            raise Fail(f"{where}: block_table({s}) holds {len(table)} blocks for {n} positions; "
                       f"with block_size {bs} that is ceil({n} / {bs}) = {math.ceil(n / bs)}")
        for b in table:
            if not 0 <= b < num_blocks:
                raise Fail(f"{where}: block_table({s}) holds block {b}, outside the pool's "
                           f"0..{num_blocks - 1}")
            if b in owner:
                also = "twice" if owner[b] == s else f"and in block_table({owner[b]})"
                raise Fail(f"{where}: block {b} is in block_table({s}) {also}: a block holds "
                           "one sequence's positions (nothing was forked here)")
            owner[b] = s


def _likely(got, read, tol, tables: dict, hidden: bool) -> str:
    """The block-order label when only sequences with scattered tables are wrong."""
    def in_order(s) -> bool:  # contiguous and ascending, as the control's table usually is
        return tables[s] == list(range(tables[s][0], tables[s][0] + len(tables[s])))

    bad = [read.seq_ids[i] for i in range(len(read.seq_ids))
           if not close(got[i], read.expected[i], tol).all()]
    if any(in_order(s) for s in bad):
        return ("even a sequence whose blocks are contiguous and in order is wrong: attention "
                "itself is off (see paged-equivalence)")
    if not bad:
        return ""
    shown = "" if hidden else f" (block_table({bad[0]}) is {tables[bad[0]]})"
    return (f"only sequences whose blocks are out of order or apart are wrong{shown}: "
            "attention follows block order, not the table? Position p is in block "
            "table[p // block_size], whatever that block's id")
