"""paged-block-table: block tables list blocks in position order, and attention follows them.

Public: a deliberately scrambled pool: a control sequence takes 3 blocks in one append (contiguous, in
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

Hidden: the same scramble, drawn from seeds: 4, 6 or 8 sequences, block sizes 1, 3 and 16,
random head layouts and head_dim, every other sequence freed in a random order, the survivors
growing over 2 or 3 rounds of random chunks (up to a few blocks at a time, so with blocks of 16
the survivors reach a hundred positions and more), appended non-contiguous, in a pool with 0 to
2 blocks to spare beyond what the workload needs. The message names the seed, never a table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from graders.judge.candidate import Candidate
from graders.serving.pool import Pool
from graders.shared import cases, hidden_cases
from graders.shared.compare import TOLERANCE, close
from graders.shared.plans import Fail, Plan

ITEM = "paged-block-table"

CONTROL, EMPTY, LATE = 100, 99, 101
TOL = TOLERANCE[torch.float32]


@dataclass(frozen=True)
class Scramble:
    """One scramble: 2 * `pairs` sequences of `heads` (Hq, Hkv) and `head_dim`, those of
    `free_order` freed in that order, the survivors growing by the rounds of `grow` (one chunk
    per survivor a round), then an empty sequence and a late one of `late` positions. The pool
    has `spare` blocks beyond what the workload needs. `shows_tables`: a failure may print a
    block table (never in a hidden case)."""

    name: str
    block_size: int
    heads: tuple[int, int]
    head_dim: int
    pairs: int
    free_order: tuple[int, ...]
    grow: tuple[tuple[int, ...], ...]
    late: int
    spare: int = 0
    noncontiguous: bool = False
    shows_tables: bool = True

    @property
    def survivors(self) -> list[int]:
        return [i for i in range(2 * self.pairs) if i not in self.free_order]

    @property
    def num_blocks(self) -> int:
        """Tight: the survivors must reuse freed blocks."""
        bs = self.block_size
        final = [2 * bs + sum(r[j] for r in self.grow) for j in range(len(self.survivors))]
        needed = 3 + sum(math.ceil(n / bs) for n in final) + math.ceil(self.late / bs)
        return max(3 + 4 * self.pairs, needed) + self.spare


PUBLIC_SCRAMBLE = Scramble(
    "a scrambled pool",
    block_size=4,
    heads=(2, 2),
    head_dim=8,
    pairs=3,
    free_order=(4, 0, 2),
    grow=((5, 3, 6), (2, 4, 3)),
    late=5,
)
HIDDEN_LAYOUTS = ((2, 2), (4, 4), (8, 2), (6, 3), (4, 1))
HIDDEN_CASES = [(5100 + i, bs) for i, bs in enumerate((1, 3, 16, 3))]


def grade(candidate: Candidate) -> str:
    _check(candidate, cases.generator(700), PUBLIC_SCRAMBLE)
    return (
        "a scrambled pool (freed blocks reused out of order): tables in position order, "
        f"ceil(length / block_size) ids each, disjoint; attention within {TOL}"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, bs in hidden_cases.seeded(HIDDEN_CASES):
        g = cases.generator(seed)
        scramble = _hidden_scramble(g, seed, bs)
        with hidden_cases.labelled(scramble.name):
            _check(candidate, g, scramble)
    return (
        f"{len(HIDDEN_CASES)} seeded scrambled pools (block sizes 1, 3, 16): tables in "
        f"position order and disjoint, attention within {TOL}"
    )


def _hidden_scramble(g: torch.Generator, seed: int, bs: int) -> Scramble:
    pairs = cases.randint(g, 2, 4)
    Hq, Hkv = cases.choice(g, HIDDEN_LAYOUTS)
    D = cases.choice(g, (8, 16))
    evens = list(range(0, 2 * pairs, 2))
    free_order = tuple(evens[i] for i in torch.randperm(pairs, generator=g).tolist())
    rounds = cases.randint(g, 2, 3)
    grow = tuple(
        tuple(cases.randint(g, 1, 3 * bs + 2) for _ in range(pairs)) for _ in range(rounds)
    )
    name = hidden_cases.name(
        seed,
        f"a scrambled pool of {2 * pairs} sequences, block_size {bs}, "
        f"{hidden_cases.layout(Hq, Hkv)}, head_dim {D}",
    )
    return Scramble(
        name,
        bs,
        (Hq, Hkv),
        D,
        pairs,
        free_order,
        grow,
        late=cases.randint(g, 1, 2 * bs + 1),
        spare=cases.randint(g, 0, 2),
        noncontiguous=True,
        shows_tables=False,
    )


def _check(candidate: Candidate, g: torch.Generator, scramble: Scramble) -> None:
    """Play `scramble` on a pool drawing its data from `g`; check every checkpoint's lengths and
    tables, then attention."""
    plan = Plan()
    pool = Pool(
        plan, g, scramble.num_blocks, scramble.block_size, *scramble.heads, scramble.head_dim
    )
    checkpoints = _play(pool, scramble)
    results = candidate.run(plan)
    for when, seqs in checkpoints:
        _check_tables(results, seqs, scramble, f"{scramble.name}, after {when}")
    tables = {when: {s: results[t] for s, (_, _, t) in seqs.items()} for when, seqs in checkpoints}
    pool.check(
        results,
        TOL,
        scramble.name,
        likely=lambda p, got, step, tol: _likely(
            got[step], p.reads[step], tol, tables[p.reads[step].after], scramble.shows_tables
        ),
    )


def _play(pool: Pool, scramble: Scramble) -> list[tuple[str, dict]]:
    """The scramble's steps, and after each phase a checkpoint: (when, {seq: (its length, its
    length() op, its block_table() op)}), attention read after each round of growth."""
    checkpoints = []

    def checkpoint(when: str, attend: list | None = None) -> None:
        checkpoints.append(
            (
                when,
                {
                    s: (
                        pool.seqs[s][0].shape[1],
                        pool.plan.call(pool.obj, "length", s),
                        pool.plan.call(pool.obj, "block_table", s),
                    )
                    for s in pool.seqs
                },
            )
        )
        if attend:
            pool.attend(attend, when)

    bs, survivors = scramble.block_size, scramble.survivors
    pool.add(CONTROL)
    pool.append(CONTROL, t=3 * bs - 1)
    for i in range(2 * scramble.pairs):
        pool.add(i)
    for _ in range(2):
        for i in range(2 * scramble.pairs):
            pool.append(i, t=bs, noncontiguous=scramble.noncontiguous)
    checkpoint("one block each in turn, twice")
    for i in scramble.free_order:
        pool.free(i)
    checkpoint("freeing every other sequence")
    for r, chunks in enumerate(scramble.grow):
        for i, t in zip(survivors, chunks):
            pool.append(i, t=t, noncontiguous=scramble.noncontiguous)
        checkpoint(f"growth round {r + 1}", [CONTROL] + survivors)
    pool.add(EMPTY)
    pool.add(LATE)
    pool.append(LATE, t=scramble.late)
    checkpoint("an empty and a late sequence were added", [CONTROL] + survivors + [LATE])
    return checkpoints


def _check_tables(results, seqs: dict, scramble: Scramble, where: str) -> None:
    """Each sequence's length() and block_table(): ceil(length / block_size) ids in the pool's
    range, none in two places."""
    bs, num_blocks, owner = scramble.block_size, scramble.num_blocks, {}
    for s, (n, length, table) in seqs.items():
        got, table = results[length], results[table]
        if isinstance(table, torch.Tensor) and table.dim() == 1 and not table.is_floating_point():
            table = table.tolist()
        if got != n:
            raise Fail(f"{where}: length({s}) is {got!r}, expected {n}")
        if not isinstance(table, list) or not all(type(b) is int for b in table):
            raise Fail(f"{where}: block_table({s}) is {table!r}, expected a list of ints")
        if len(table) != math.ceil(n / bs):
            raise Fail(
                f"{where}: block_table({s}) holds {len(table)} blocks for {n} positions; "
                f"with block_size {bs} that is ceil({n} / {bs}) = {math.ceil(n / bs)}"
            )
        for b in table:
            if not 0 <= b < num_blocks:
                raise Fail(
                    f"{where}: block_table({s}) holds block {b}, outside the pool's "
                    f"0..{num_blocks - 1}"
                )
            if b in owner:
                also = "twice" if owner[b] == s else f"and in block_table({owner[b]})"
                raise Fail(
                    f"{where}: block {b} is in block_table({s}) {also}: a block holds "
                    "one sequence's positions (nothing was forked here)"
                )
            owner[b] = s


def _likely(got, read, tol, tables: dict, shows_tables: bool) -> str:
    """The block-order label when only sequences with scattered tables are wrong."""

    def in_order(s) -> bool:  # contiguous and ascending, as the control's table usually is
        return tables[s] == list(range(tables[s][0], tables[s][0] + len(tables[s])))

    bad = [
        read.seq_ids[i]
        for i in range(len(read.seq_ids))
        if not close(got[i], read.expected[i], tol).all()
    ]
    if any(in_order(s) for s in bad):
        return (
            "even a sequence whose blocks are contiguous and in order is wrong: attention "
            "itself is off (see paged-equivalence)"
        )
    if not bad:
        return ""
    shown = f" (block_table({bad[0]}) is {tables[bad[0]]})" if shows_tables else ""
    return (
        f"only sequences whose blocks are out of order or apart are wrong{shown}: "
        "attention follows block order, not the table? Position p is in block "
        "table[p // block_size], whatever that block's id"
    )
