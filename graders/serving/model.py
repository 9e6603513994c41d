"""The judge's model of a paged pool: which blocks each sequence holds, after every call.

`Book` is what the contract (section 4) says a PagedKVCache holds after each call, in the
judge's own terms and nothing else: no tensors, no plans, no candidate. The serving items play
their scripts on a `graders.serving.session.Session`, which does every step to a Book as well and
compares the candidate's outcomes and readings with the Book's.
"""

from __future__ import annotations


class Full(Exception):
    """The book's CacheFull."""


class Book:
    """What the contract says a PagedKVCache must hold after each call, in the judge's terms.

    Tables list the judge's own block names (1, 2, 3, ... in the order blocks are taken); a name
    is held by as many tables as share it, and is free when none does. `reserved` counts the
    blocks still promised to each admitted sequence: its own new blocks (copy-on-write copies
    included) are paid from them first, nobody else may take them, and a reserved block no one
    holds still counts as free (the starter's docstrings say so). Each method does what the
    candidate's must, or raises what it must raise (`Full` for CacheFull).
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.tables: dict = {}  # seq -> block names; the dict's order is the order of adding
        self.lengths: dict = {}
        self.holders: dict[int, int] = {}  # block name -> how many tables hold it
        self.reserved: dict = {}  # admitted seq -> blocks still promised to it
        self.ever_shared: set[int] = set()  # blocks a fork gave a second holder
        self.taken = 0

    @property
    def num_free(self) -> int:
        """Blocks no table holds (reserved ones included)."""
        return self.num_blocks - len(self.holders)

    def blocks(self, tokens: int) -> int:
        """Blocks that `tokens` positions take: ceil(tokens / block_size)."""
        return -(-tokens // self.block_size)

    def unreserved(self) -> int:
        """Free blocks not promised to any admitted sequence."""
        return self.num_free - sum(self.reserved.values())

    def can_admit(self, tokens: int) -> bool:
        return self.blocks(tokens) <= self.unreserved()

    def add(self, seq) -> None:
        """A new, empty sequence; ValueError if `seq` is present."""
        if seq in self.tables:
            raise ValueError(seq)
        self.tables[seq], self.lengths[seq] = [], 0

    def admit(self, seq, max_tokens: int) -> bool:
        """Add `seq` with blocks(max_tokens) promised to it, if the unreserved blocks cover them;
        else add nothing and return False."""
        if not self.can_admit(max_tokens):
            return False
        self.add(seq)
        self.reserved[seq] = self.blocks(max_tokens)
        return True

    def append(self, seq, t: int) -> None:
        """t more positions for `seq`: a shared, partly filled last block is first replaced by a
        copy, then new blocks are taken as positions need them, paid from the sequence's own
        reservation first. Full, changing nothing, when they are not free for it."""
        if seq not in self.tables:
            raise KeyError(seq)
        table, length = self.tables[seq], self.lengths[seq]
        copy = length % self.block_size != 0 and self.holders[table[-1]] > 1  # shared, partial
        new = self.blocks(length + t) - len(table)
        own = self.reserved.get(seq, 0)
        if new + copy > own + self.unreserved():
            raise Full(seq)
        if seq in self.reserved:
            self.reserved[seq] = own - min(own, new + copy)
        if copy:
            self.holders[table[-1]] -= 1
            table[-1] = self._take()
        table.extend(self._take() for _ in range(new))
        self.lengths[seq] += t

    def fork(self, src, dst) -> None:
        """Add `dst` holding `src`'s blocks and length: no block taken, each shared block gains a
        holder. KeyError for an unknown src, ValueError for a present dst."""
        if src not in self.tables:
            raise KeyError(src)
        self.add(dst)
        self.tables[dst], self.lengths[dst] = list(self.tables[src]), self.lengths[src]
        for block in self.tables[dst]:
            self.holders[block] += 1
        self.ever_shared.update(self.tables[dst])

    def free(self, seq) -> None:
        """Drop `seq`: each of its blocks loses a holder (a block with none is free again), and
        what is left of its reservation is released. KeyError for an unknown seq."""
        if seq not in self.tables:
            raise KeyError(seq)
        for block in self.tables.pop(seq):
            self.holders[block] -= 1
            if not self.holders[block]:
                del self.holders[block]
        del self.lengths[seq]
        self.reserved.pop(seq, None)

    def evict(self):
        """Free the most recently added sequence still present and return it; ValueError when
        there is none."""
        if not self.tables:
            raise ValueError("nothing to evict")
        seq = next(reversed(self.tables))
        self.free(seq)
        return seq

    def _take(self) -> int:
        self.taken += 1
        self.holders[self.taken] = 1
        return self.taken
