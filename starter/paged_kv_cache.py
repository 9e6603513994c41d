"""Your paged KV cache: the serving track (beyond L6).

One attention layer's cache for many sequences at once, stored the way serving engines
(vLLM's PagedAttention) store it: in fixed-size blocks of one shared pool, instead of one slab per
sequence sized for its longest possible length.

Blocks and block tables. The K pool and the V pool each hold `num_blocks` blocks of `block_size`
positions (for example `[num_blocks, kv_heads, block_size, head_dim]`). A sequence owns a block
table: the ids of its blocks, in position order. Position p of a sequence lives in block
table[p // block_size], slot p % block_size. Blocks need not be contiguous or in order:

    sequence A: length 11, block_size 4          the pool (num_blocks = 8)
    positions   0..3   4..7   8..10              block   0   1   2   3   4   5   6   7
    table     [   7,     2,     5  ]             holds   .   .  A:1  .   .  A:2  .  A:0
    position 9 -> table[9 // 4] = table[2] = block 5, slot 9 % 4 = 1.
    Slot 3 of block 5 is not written yet; A takes a new block only when block 5 is full.

Tensor layout:
    append:  key, value  [kv_heads, t, head_dim], t >= 1, the next t positions of one sequence
    attend:  query       [N, query_heads, 1, head_dim], the newest token of N sequences
             returns     [N, query_heads, 1, head_dim]
query_heads % kv_heads == 0; query head h reads KV head h // (query_heads // kv_heads)
(MHA: equal heads; MQA: kv_heads == 1; GQA otherwise), as in the dense kata.

Reference counts and copy-on-write. `fork(src, dst)` makes dst a copy of src that shares every
one of src's blocks: no data is copied, each shared block's reference count (how many sequences
hold it) goes up by one, and num_free_blocks does not change. Before a sequence writes into a
block that another sequence also holds (a partly filled last block), it copies that block to a
fresh one and writes into the copy (copy-on-write). Full shared blocks are never written again and
stay shared. A block returns to the pool when its reference count drops to 0.

Admission. `admit(seq_id, max_tokens)` adds a sequence only if the blocks it may ever need,
ceil(max_tokens / block_size), are free beyond the blocks already reserved by other admitted
sequences, and reserves them. An admitted sequence's appends draw from its own reservation first;
other sequences' appends may not take reserved blocks (they get CacheFull). `can_admit(n)` asks
the same question without adding anything. `free` releases what is left of a reservation.

Eviction. `evict()` frees the most recently added sequence still present (add, admit and fork's
dst all count as adding, in call order) and returns its id: recompute-style preemption, the
scheduler re-runs that request's prompt later.

int8. With `quantize="int8"`, K and V are stored as int8 with one float32 scale per
(block, head, slot), i.e. per token and head: scale = absmax / 127 of that token's head_dim
values (guard an all-zero token against 0 / 0). Quantize when writing, dequantize in attend.
A per-token scale means a later, larger token is never clipped. `pool_bytes` counts all storage
(pools and scales): for head_dim 64 it must be at most 0.3x the float32 pool.

Replace every `raise NotImplementedError` below. Grade it:
    kata grade --track serving starter/paged_kv_cache.py
Rubric: paged-equivalence, paged-block-table, paged-cow, paged-free, admission, eviction,
quantized-kv.
"""

import torch
from torch import Tensor


class CacheFull(RuntimeError):
    """The blocks an append needs are not available. Raised before the cache changes at all."""


class PagedKVCache:
    """One attention layer's K and V for many sequences, in blocks of one shared pool.

    Attributes the grader reads (plain attributes or properties, your choice):
        num_free_blocks: int  blocks no sequence holds (a reserved block no sequence holds yet
                              is still free). After every sequence is freed, == num_blocks.
        pool_bytes:      int  bytes of all storage the pool holds: K and V pools, plus the
                              scales when quantized.
    """

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int, *,
                 dtype: torch.dtype = torch.float32, device="cpu", quantize: str | None = None):
        """A pool of num_blocks blocks of block_size positions, for K and for V.

        dtype and device: what append takes and attend's query has (attend returns the query's
        dtype). quantize: None, or "int8" to store K and V as int8 with a float32 scale per
        (block, head, slot).
        """
        self.num_blocks, self.block_size = num_blocks, block_size
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.dtype, self.device, self.quantize = dtype, device, quantize

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds."""
        raise NotImplementedError

    @property
    def pool_bytes(self) -> int:
        """Bytes of all storage the pool holds (scales included)."""
        raise NotImplementedError

    def add(self, seq_id) -> None:
        """A new, empty sequence (length 0, empty block table, no reservation).

        ValueError if seq_id is already present.
        """
        raise NotImplementedError

    def admit(self, seq_id, max_tokens: int) -> bool:
        """Add seq_id and reserve ceil(max_tokens / block_size) blocks for its future growth.

        Only when that many free blocks remain beyond the reservations of other admitted
        sequences: then add and reserve, and return True. Otherwise return False and change
        nothing. ValueError if seq_id is already present.
        """
        raise NotImplementedError

    def can_admit(self, num_tokens: int) -> bool:
        """Would ceil(num_tokens / block_size) blocks fit beyond all outstanding reservations?

        The same question admit asks; changes nothing.
        """
        raise NotImplementedError

    def append(self, seq_id, key: Tensor, value: Tensor) -> None:
        """Write key, value ([kv_heads, t, head_dim], t >= 1) at positions length .. length+t-1.

        Position p goes to block table[p // block_size], slot p % block_size; take blocks from
        the pool as needed. Writing into a partly filled last block that another sequence also
        holds copies that block first (copy-on-write). An admitted sequence draws its new blocks
        from its own reservation first; no sequence may take blocks reserved for another.

        KeyError for an unknown seq_id. ValueError, changing nothing, when the rank is not 3,
        key and value shapes differ, t < 1, kv_heads or head_dim differ from the cache's, or
        dtype or device differ. All or nothing: when the blocks it needs (a copy-on-write copy
        included) are not available, raise CacheFull and change nothing (lengths, tables,
        num_free_blocks, stored data).
        """
        raise NotImplementedError

    def attend(self, seq_ids, query: Tensor) -> Tensor:
        """Newest-token attention for a batch of sequences.

        seq_ids: N sequence ids. query: [N, Hq, 1, head_dim]. Row i attends over positions
        0 .. length(seq_ids[i]) - 1 of seq_ids[i], through its block table. Scores scaled by
        1/sqrt(head_dim), softmax in float32 (stable for large logits), weights times values.
        Query head h reads KV head h // (Hq // kv_heads). A sequence of length 0 gives zeros.
        Returns [N, Hq, 1, head_dim] in the query's dtype and device.

        KeyError for an unknown id. ValueError for a query of wrong rank, a batch other than N,
        a head_dim, dtype or device other than the cache's, or Hq % kv_heads != 0. Modifies
        neither the cache nor the query.
        """
        raise NotImplementedError

    def fork(self, src, dst) -> None:
        """dst starts as a copy of src (same length, same positions) sharing every block.

        No data is copied: each of src's blocks gets one more holder, and num_free_blocks is
        unchanged. Later writes to either copy their shared partly filled last block first, so
        neither ever sees the other's writes. KeyError for an unknown src, ValueError if dst is
        already present.
        """
        raise NotImplementedError

    def free(self, seq_id) -> None:
        """The sequence ends. Each of its blocks returns to the pool when no sequence holds it.

        Also releases whatever remains of its reservation. KeyError for an unknown or already
        freed seq_id. After every sequence is freed, num_free_blocks == num_blocks.
        """
        raise NotImplementedError

    def evict(self):
        """Free the most recently added sequence still present and return its id.

        add, admit and fork's dst count as adding, in call order. ValueError when there is none.
        """
        raise NotImplementedError

    def length(self, seq_id) -> int:
        """Positions written to seq_id. KeyError for an unknown id."""
        raise NotImplementedError

    def block_table(self, seq_id) -> list[int]:
        """seq_id's block ids in position order (a list of ints). KeyError for an unknown id."""
        raise NotImplementedError
