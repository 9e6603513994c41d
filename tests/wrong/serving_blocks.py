"""Wrong paged caches: the pool's bookkeeping (forks, copy-on-write, free, CacheFull, admission,
eviction).

Each is solutions/paged_kv_cache.py with one mistake candidates make; `fails` lists exactly the
serving items it fails (all seven are graded).
"""

from graders.shared.mutation import PAGED_REFERENCE, Mutant
from tests.wrong import wrong_serving

_FORK_REFS = """        for block in table:
            self._refs[block] += 1
        self._tables[dst] = list(table)"""
_COW = "cow = length % bs != 0 and self._refs[table[-1]] > 1"
_NEEDED = "needed = new_blocks + int(cow)"
_COPY = """        if cow:
            shared = table[-1]
            table[-1] = self._take()
            self._refs[shared] -= 1
            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):
                if pool is not None:
                    pool[table[-1]] = pool[shared]"""
_FREE_LOOP = """        for block in self._table(seq_id):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)
        del self._tables[seq_id], self._lengths[seq_id]"""
_ROOM = "if needed > own + self._unreserved():"
_TAKE = """    def _take(self) -> int:
        block = self._free.pop()"""
_CAN_ADMIT = "return self._blocks_for(num_tokens) <= self._unreserved()"
_RESERVE = "self._reserved[seq_id] = self._blocks_for(max_tokens)"
_RELEASE = "        self._reserved.pop(seq_id, None)\n"
_VICTIM = "seq_id = next(reversed(self._tables))"
_EVICT_FREE = """        seq_id = next(reversed(self._tables))
        self.free(seq_id)"""
_ADD = """        self._tables[seq_id] = []
        self._lengths[seq_id] = 0"""


def _mutant(name: str, description: str, *replace: tuple[str, str]) -> Mutant:
    return Mutant(name, description, replace=replace, base=PAGED_REFERENCE)


WRONG = [
    wrong_serving(
        _mutant(
            "fork-copies-blocks",
            "fork copies every block of src into fresh blocks: no sharing, so "
            "num_free_blocks drops at the fork",
            (
                _FORK_REFS,
                """        copies = [self._take() for _ in table]
        for block, copy in zip(table, copies):
            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):
                if pool is not None:
                    pool[copy] = pool[block]
        self._tables[dst] = copies""",
            ),
        ),
        fails={"paged-cow", "paged-free"},
    ),
    wrong_serving(
        _mutant(
            "fork-without-refcounts",
            "fork shares src's block ids but counts no second holder: a "
            "write never sees the block as shared, and freeing one branch frees the other's blocks",
            (_FORK_REFS, "        self._tables[dst] = list(table)  # the same blocks"),
        ),
        fails={"paged-cow", "paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cow-never-copies",
            "a write into a shared partial block writes in place: the other branch sees it",
            (_COW, "cow = False  # blocks are written where they are"),
        ),
        fails={"paged-cow", "paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cow-only-when-it-fits",
            "copy-on-write only when the append stays inside the shared "
            "partial block: one that fills it and spills into new blocks writes into it in place "
            "(public paged-cow has no such write; its hidden cases and paged-free's counts catch it)",
            (_COW, _COW + " and new_blocks == 0"),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cow-copies-full-blocks",
            "a write by a sequence holding shared blocks copies every shared "
            "block, full ones included",
            (_COW, "cow = [i for i, block in enumerate(table) if self._refs[block] > 1]"),
            (_NEEDED, "needed = new_blocks + len(cow)"),
            (
                _COPY,
                """        for i in cow:  # every shared block gets a private copy
            shared = table[i]
            table[i] = self._take()
            self._refs[shared] -= 1
            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):
                if pool is not None:
                    pool[table[i]] = pool[shared]""",
            ),
        ),
        fails={"paged-cow", "paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cow-keeps-old-count",
            "the copy-on-write copy is taken, but the shared block keeps its "
            "holder count: it never returns to the pool (a leak)",
            ("            self._refs[shared] -= 1\n", ""),
        ),
        fails={"paged-cow", "paged-free"},
    ),
    wrong_serving(
        _mutant(
            "free-ignores-refcounts",
            "free returns every block of the sequence to the pool, even blocks a fork still holds",
            (
                _FREE_LOOP,
                """        for block in self._table(seq_id):
            self._refs[block] = 0
            self._free.append(block)
        del self._tables[seq_id], self._lengths[seq_id]""",
            ),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "free-unknown-silently",
            "free of an unknown or already freed id does nothing, no KeyError",
            (
                _FREE_LOOP,
                """        for block in self._tables.get(seq_id, []):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)
        self._tables.pop(seq_id, None), self._lengths.pop(seq_id, None)""",
            ),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "free-twice-silently",
            "freeing an id that was freed before is allowed (a no-op); only "
            "ids never seen raise KeyError",
            (_ADD, _ADD + "\n        self._seen = getattr(self, '_seen', set()) | {seq_id}"),
            (
                "        for block in self._table(seq_id):\n            self._refs[block] -= 1",
                (
                    "        if seq_id not in self._tables and seq_id in getattr(self, '_seen', ()):\n"
                    "            return  # freed already: nothing left to do\n"
                    "        for block in self._table(seq_id):\n            self._refs[block] -= 1"
                ),
            ),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cachefull-midway",
            "append checks only that some block is free, then takes blocks one "
            "at a time and raises CacheFull when the pool runs out: the blocks taken leak",
            (_ROOM, "if needed and own + self._unreserved() <= 0:"),
            (
                _TAKE,
                """    def _take(self) -> int:
        if not self._free:
            raise CacheFull("the pool ran out of blocks")
        block = self._free.pop()""",
            ),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cachefull-after-length",
            "append counts the new positions in the length before it "
            "finds out the blocks are not there",
            (_NEEDED, _NEEDED + "\n        self._lengths[seq_id] = length + t"),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "cachefull-forgets-cow",
            "the blocks an append needs leave out the copy-on-write copy: "
            "with no free block, the copy fails with IndexError instead of CacheFull",
            (_NEEDED, "needed = new_blocks"),
        ),
        fails={"paged-free"},
    ),
    wrong_serving(
        _mutant(
            "admit-free-blocks-only",
            "admission compares the request with the free blocks, "
            "ignoring what is already promised to admitted sequences",
            (_CAN_ADMIT, "return self._blocks_for(num_tokens) <= self.num_free_blocks"),
        ),
        fails={"admission"},
    ),
    wrong_serving(
        _mutant(
            "admit-floor-blocks",
            "admission counts floor(max_tokens / block_size) blocks, not the "
            "ceiling: a request's last, partial block is not reserved",
            (_CAN_ADMIT, "return num_tokens // self.block_size <= self._unreserved()"),
            (_RESERVE, "self._reserved[seq_id] = max_tokens // self.block_size"),
        ),
        fails={"admission"},
    ),
    wrong_serving(
        _mutant(
            "admit-reserves-tokens",
            "admit reserves max_tokens (tokens) where ceil(max_tokens / "
            "block_size) blocks are meant",
            (_RESERVE, "self._reserved[seq_id] = max_tokens"),
        ),
        fails={"admission"},
    ),
    wrong_serving(
        _mutant(
            "free-keeps-reservation",
            "free returns the blocks but not what is left of the sequence's reservation",
            (_RELEASE, ""),
        ),
        fails={"admission"},
    ),
    wrong_serving(
        _mutant(
            "evict-oldest",
            "evict takes the sequence added first (FIFO), not the newest",
            (_VICTIM, "seq_id = next(iter(self._tables))"),
        ),
        fails={"eviction"},
    ),
    wrong_serving(
        _mutant(
            "evict-keeps-blocks",
            "evict forgets the sequence without giving its blocks back",
            (
                _EVICT_FREE,
                """        seq_id = next(reversed(self._tables))
        del self._tables[seq_id], self._lengths[seq_id]  # recomputed later
        self._reserved.pop(seq_id, None)""",
            ),
        ),
        fails={"eviction"},
    ),
    wrong_serving(
        _mutant(
            "evict-skips-forks",
            "evict keeps its own order of add and admit calls: a fork's dst is never the newest",
            (_ADD, _ADD + "\n        self._order = getattr(self, '_order', []) + [seq_id]"),
            (_VICTIM, "seq_id = next(s for s in reversed(self._order) if s in self._tables)"),
        ),
        fails={"eviction"},
    ),
]
