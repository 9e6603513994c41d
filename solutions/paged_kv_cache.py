"""Reference solution, serving track: a paged KV cache (one layer, many sequences, one pool).

A dense cache gives each sequence a slab sized for the longest length it may reach. A server
with many requests of unknown length wastes most of that memory: slabs are mostly empty
(internal fragmentation), and freed slabs leave holes of the wrong size for the next request
(external fragmentation). PagedAttention (vLLM) stores K and V in fixed-size blocks of one shared
pool instead, like pages of virtual memory: a sequence owns a block table, the ids of its blocks
in position order, and takes one more block only when its last one is full. At most
block_size - 1 slots per sequence are ever unused, and any free block fits any sequence.

    sequence A: length 11, block_size 4          the pool (num_blocks = 8)
    positions   0..3   4..7   8..10              block   0   1   2   3   4   5   6   7
    table     [   7,     2,     5  ]             holds   .   .  A:1  .   .  A:2  .  A:0
    position p lives in block table[p // block_size], slot p % block_size:
    position 9 -> table[9 // 4] = table[2] = block 5, slot 9 % 4 = 1.
    A's blocks are neither contiguous nor in order; attention follows the table.

Layout:
    K pool, V pool   [num_blocks, Hkv, block_size, D]  (int8: also scales [num_blocks, Hkv,
                     block_size], float32, one per token and head)
    append           key, value [Hkv, t, D] of one sequence
    attend           query [N, Hq, 1, D], the newest token of N sequences -> [N, Hq, 1, D]

What a serving cache adds, and why:
- Reference counts and copy-on-write. Parallel sampling and beam search branch a sequence.
  `fork` lets the branch share every block (a shared prompt is stored once) by counting the
  holders of each block. A sequence that would write into a block someone else holds copies it
  first, so branches never see each other's writes. Full blocks are never written again, so they
  stay shared for good.
- Admission on future growth. A request that fits now may not fit 500 tokens later. `admit`
  reserves the blocks its whole budget (max_tokens) needs, so an admitted request is not starved
  halfway by others' growth: other sequences' appends cannot take reserved blocks.
- Recompute-style preemption. When memory runs out anyway, `evict` frees the most recently added
  sequence (it has done the least work: last in, first out); the scheduler later re-runs its
  prompt instead of swapping its blocks out to host memory.
- int8 with per-token scales: a quarter of float32's bytes for K and V, plus one float32 scale
  per token and head: 4D / (D + 4) times more tokens fit in the same memory, 3.8x for head_dim
  64 and 3.9x for head_dim 128.
"""

import math

import torch
from torch import Tensor


class CacheFull(RuntimeError):
    """Not enough free, unreserved blocks for the request. The cache was not changed."""


class PagedKVCache:
    """One attention layer's K and V for many sequences, in blocks of one shared pool.

    Where the contract is silent:
    - `num_free_blocks` counts blocks no sequence holds, reserved or not: a reservation is a
      number of blocks promised to a sequence, not particular blocks.
    - An admitted sequence takes its new blocks (copy-on-write copies included) from its own
      reservation first; past it, it takes unreserved free blocks like any other sequence, and
      may get CacheFull. max_tokens is a promise of room, not a cap.
    - fork's dst has no reservation (it takes unreserved blocks). It counts as added at the fork,
      so `evict` takes it before its src; evicting it returns only the blocks it alone holds.
    - A free list used as a stack: the most recently freed block is reused first.
    - `pool_bytes` counts the pools and their scales only, not what attend keeps between calls
      (workspace for the batch being attended, not storage of the pool; `kata bench` counts it
      in the memory a cache holds).
    """

    def __init__(self, num_blocks, block_size, kv_heads, head_dim, *, dtype=torch.float32,
                 device="cpu", quantize=None):
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size),
                            ("kv_heads", kv_heads), ("head_dim", head_dim)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
        self.block_size, self.kv_heads, self.head_dim = block_size, kv_heads, head_dim
        self.dtype, self.quantize = dtype, quantize  # dtype: what append takes and attend returns
        shape = (num_blocks, kv_heads, block_size, head_dim)
        stored = torch.int8 if quantize else dtype
        self.k_pool = torch.zeros(shape, dtype=stored, device=device)  # [num_blocks, Hkv, bs, D]
        self.v_pool = torch.zeros_like(self.k_pool)
        self.k_scale = self.v_scale = None
        if quantize:
            # [num_blocks, Hkv, bs]: one float32 scale per token and head
            self.k_scale = torch.zeros(shape[:3], dtype=torch.float32, device=device)
            self.v_scale = torch.zeros_like(self.k_scale)
        self.device = self.k_pool.device
        self._free = list(range(num_blocks - 1, -1, -1))  # stack of free block ids: pops 0 first
        self._refs = [0] * num_blocks  # how many sequences hold each block
        # seq_id -> block ids in position order. A dict keeps insertion order, and a freed id is
        # deleted, so its last key is always the most recently added sequence still present.
        self._tables: dict = {}
        self._lengths: dict = {}  # seq_id -> number of positions written
        self._reserved: dict = {}  # seq_id -> blocks still promised to an admitted sequence
        self._buffers: dict = {}  # attend's scratch buffers, kept from call to call: see _scratch

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def pool_bytes(self) -> int:
        tensors = (self.k_pool, self.v_pool, self.k_scale, self.v_scale)
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    # -- sequences -------------------------------------------------------------------------------

    def add(self, seq_id) -> None:
        """A new, empty sequence. ValueError if seq_id is already present."""
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        self._tables[seq_id] = []
        self._lengths[seq_id] = 0

    def can_admit(self, num_tokens: int) -> bool:
        """Do ceil(num_tokens / block_size) blocks fit beyond all outstanding reservations?"""
        return self._blocks_for(num_tokens) <= self._unreserved()

    def admit(self, seq_id, max_tokens: int) -> bool:
        """Add seq_id and reserve the blocks max_tokens positions need; False (no change) if not."""
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        if not self.can_admit(max_tokens):
            return False
        self.add(seq_id)
        self._reserved[seq_id] = self._blocks_for(max_tokens)
        return True

    def fork(self, src, dst) -> None:
        """dst starts as a copy of src that shares all of src's blocks: no data is copied."""
        table = self._table(src)
        if dst in self._tables:
            raise ValueError(f"sequence {dst!r} already exists")
        for block in table:
            self._refs[block] += 1
        self._tables[dst] = list(table)
        self._lengths[dst] = self._lengths[src]

    def free(self, seq_id) -> None:
        """seq_id ended: a block returns to the pool when its last holder lets go of it."""
        for block in self._table(seq_id):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._free.append(block)
        del self._tables[seq_id], self._lengths[seq_id]
        self._reserved.pop(seq_id, None)  # its unused reservation goes back to everyone

    def evict(self):
        """Free the most recently added sequence still present and return its id."""
        if not self._tables:
            raise ValueError("evict: there is no sequence to evict")
        seq_id = next(reversed(self._tables))
        self.free(seq_id)
        return seq_id

    def length(self, seq_id) -> int:
        self._table(seq_id)
        return self._lengths[seq_id]

    def block_table(self, seq_id) -> list[int]:
        return list(self._table(seq_id))  # a copy: callers cannot corrupt the cache

    # -- append ----------------------------------------------------------------------------------

    def append(self, seq_id, key: Tensor, value: Tensor) -> None:
        """Write key, value ([Hkv, t, D]) at positions length .. length + t - 1 of seq_id.

        All or nothing: every check, and the count of blocks needed, comes before any change.
        """
        table = self._table(seq_id)
        self._validate_kv(key, value)
        t, length, bs = key.shape[1], self._lengths[seq_id], self.block_size
        new_blocks = self._blocks_for(length + t) - len(table)
        # Writing into a partly filled last block that another sequence also holds: copy it
        # first (copy-on-write). A full last block is not written again, so it stays shared.
        cow = length % bs != 0 and self._refs[table[-1]] > 1
        needed = new_blocks + int(cow)
        own = self._reserved.get(seq_id, 0)
        if needed > own + self._unreserved():
            raise CacheFull(f"append to {seq_id!r} needs {needed} blocks; {own} reserved for it "
                            f"and {self._unreserved()} free unreserved blocks are available")
        # Nothing below can fail. The sequence's own reservation pays first.
        if seq_id in self._reserved:
            self._reserved[seq_id] = own - min(own, needed)
        if cow:
            shared = table[-1]
            table[-1] = self._take()
            self._refs[shared] -= 1  # still >= 1: the other holders keep it
            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):
                if pool is not None:
                    pool[table[-1]] = pool[shared]
        table.extend(self._take() for _ in range(new_blocks))

        # Scatter the t new positions to their (block, slot) in one indexed write per pool.
        pos = torch.arange(length, length + t, device=self.device)  # [t]
        blocks = torch.tensor(table, device=self.device)[pos // bs]  # [t]
        slots = pos % bs  # [t]
        self._write(self.k_pool, self.k_scale, blocks, slots, key)
        self._write(self.v_pool, self.v_scale, blocks, slots, value)
        self._lengths[seq_id] = length + t

    def _write(self, pool: Tensor, scale: Tensor | None, blocks: Tensor, slots: Tensor, x: Tensor):
        # pool[blocks, :, slots] indexes [t, Hkv, D]: the indexed dims come first, then the rest.
        x = x.transpose(0, 1)  # [Hkv, t, D] -> [t, Hkv, D]
        if scale is None:
            pool[blocks, :, slots] = x
            return
        # int8: one scale per token and head, absmax / 127, so every value of that token and head
        # maps into -127..127 exactly. A later token 100x larger than earlier ones gets its own,
        # larger scale, so it is never clipped (a scale per block or per head, fixed by the first
        # tokens written, would clip it); each token's error is at most its own absmax / 254.
        xf = x.float()
        s = xf.abs().amax(dim=-1) / 127  # [t, Hkv]
        s = torch.where(s > 0, s, torch.ones_like(s))  # an all-zero token: any scale; avoid 0/0
        pool[blocks, :, slots] = (xf / s[..., None]).round().clamp(-127, 127).to(torch.int8)
        scale[blocks, :, slots] = s

    # -- attend ----------------------------------------------------------------------------------

    def attend(self, seq_ids, query: Tensor) -> Tensor:
        """Newest-token attention: row i of query ([N, Hq, 1, D]) over every position of seq_ids[i].

        Scores scaled by 1/sqrt(D), softmax in float32; a sequence of length 0 gives zeros.
        Returns [N, Hq, 1, D] in the query's dtype. Modifies neither the cache nor the query.
        """
        seq_ids = list(seq_ids)
        tables = [self._table(s) for s in seq_ids]
        if not isinstance(query, Tensor) or query.dim() != 4 or query.shape[2] != 1:
            got = tuple(query.shape) if isinstance(query, Tensor) else type(query).__name__
            raise ValueError(f"rank: query must be [N, Hq, 1, D], got {got}")
        n, q_heads, _, head_dim = query.shape
        for name, got, want in (("batch", n, len(seq_ids)), ("head_dim", head_dim, self.head_dim),
                                ("dtype", query.dtype, self.dtype),
                                ("device", query.device, self.device)):
            if got != want:
                raise ValueError(f"{name}: query has {got}, expected {want}")
        if q_heads % self.kv_heads:
            raise ValueError(f"heads: query heads {q_heads} not a multiple of {self.kv_heads}")
        width = max((len(t) for t in tables), default=0)  # blocks in the longest table
        if width == 0:
            return torch.zeros_like(query)  # every sequence is empty

        # One index tensor for the batch: each table padded with block 0 to the longest. What the
        # padding (or a last block's unwritten slots) holds is never used: we mask by length.
        padded = [t + [0] * (width - len(t)) for t in tables]
        index = torch.tensor(padded, device=self.device)  # [N, W] block ids
        lengths = torch.tensor([self._lengths[s] for s in seq_ids], device=self.device)  # [N]
        bs = self.block_size
        # Position p of a sequence is slot p % bs of its block number p // bs (W * bs positions).
        past_end = torch.arange(width * bs, device=self.device) >= lengths[:, None]  # [N, T]
        keys = self._gather("k", index)  # [N, W, Hkv, bs, D], float32
        values = self._gather("v", index)
        # Stale slots may hold anything a freed sequence wrote, even inf or NaN, and 0 * NaN is
        # NaN: zero them in V (masked_fill on the scores already replaces them in K). Only the
        # slots past each length are written, not the whole tensor.
        stale_row, stale_pos = past_end.nonzero(as_tuple=True)
        values[stale_row, stale_pos // bs, :, stale_pos % bs] = 0.0

        groups = q_heads // self.kv_heads
        # Heads h = kv * groups + g: this reshape puts query head h beside KV head h // groups,
        # and K, V broadcast over the group dimension without being copied per query head.
        q = query.reshape(n, 1, self.kv_heads, groups, head_dim).float()  # [N, 1, Hkv, G, D]
        # Attention block by block, in the pool's layout: turning K and V into [N, Hkv, T, D]
        # would copy them once more. Scores of each block, then one softmax over all positions.
        scores = q @ keys.transpose(-1, -2) / math.sqrt(head_dim)  # [N, W, Hkv, G, bs], float32
        scores = scores.permute(0, 2, 3, 1, 4).reshape(n, self.kv_heads, groups, width * bs)
        # No causal mask: each query is its sequence's newest position, so every cached position
        # is its past or itself; only the positions past each length are masked.
        scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))  # [N, Hkv, G, T]
        weights = torch.softmax(scores, dim=-1)  # max-subtracted inside: stable for large logits
        # A sequence of length 0 has every score -inf, and softmax gives NaN: zeros instead.
        weights = weights.masked_fill((lengths == 0)[:, None, None, None], 0.0)
        weights = weights.reshape(n, self.kv_heads, groups, width, bs).permute(0, 3, 1, 2, 4)
        out = (weights @ values).sum(dim=1)  # each block's share [N, W, Hkv, G, D], summed
        return out.reshape(n, q_heads, 1, head_dim).to(query.dtype)

    def _gather(self, which: str, index: Tensor) -> Tensor:
        """The K or V blocks of index ([N, W]) in table order as [N, W, Hkv, bs, D], float32.

        The result lives in scratch buffers kept from call to call, regrown only when a batch
        needs more blocks: a fresh tensor the size of the cache at every step costs more than
        the attention itself (the OS hands a large allocation its memory a page at a time).
        A float32 pool is copied once (the gather); a bf16, fp16 or int8 pool twice (the gather,
        then the upcast into a float32 scratch), and int8 is then scaled in place.
        """
        pool, scale = (self.k_pool, self.k_scale) if which == "k" else (self.v_pool, self.v_scale)
        rows = index.flatten()  # [N * W]: one gather for the whole batch
        x = torch.index_select(pool, 0, rows, out=self._scratch(which, pool.dtype, len(rows)))
        if pool.dtype != torch.float32:  # bf16, fp16, int8: upcast into a float32 scratch
            x = self._scratch(which + "32", torch.float32, len(rows)).copy_(x)
        if scale is not None:
            x.mul_(scale.index_select(0, rows)[..., None])  # dequantize: [N * W, Hkv, bs, 1]
        return x.view(*index.shape, *pool.shape[1:])

    def _scratch(self, name: str, dtype: torch.dtype, blocks: int) -> Tensor:
        """A reusable [blocks, Hkv, bs, D] buffer (what is in it is garbage until written). It
        grows with 25% to spare, so a growing sequence regrows it only now and then."""
        buffer = self._buffers.get(name)
        if buffer is None or buffer.shape[0] < blocks:
            size = (blocks + blocks // 4, *self.k_pool.shape[1:])
            buffer = torch.empty(size, dtype=dtype, device=self.device)
            self._buffers[name] = buffer
        return buffer[:blocks]

    # -- helpers ---------------------------------------------------------------------------------

    def _table(self, seq_id) -> list[int]:
        try:
            return self._tables[seq_id]
        except KeyError:
            raise KeyError(f"unknown sequence {seq_id!r} (never added, or already freed)") from None

    def _blocks_for(self, num_tokens: int) -> int:
        if not isinstance(num_tokens, int) or num_tokens < 0:
            raise ValueError(f"number of tokens must be an int >= 0, got {num_tokens!r}")
        return -(-num_tokens // self.block_size)  # ceil(num_tokens / block_size)

    def _unreserved(self) -> int:
        """Free blocks no admitted sequence has been promised: what anyone may take."""
        return len(self._free) - sum(self._reserved.values())

    def _take(self) -> int:
        block = self._free.pop()
        self._refs[block] = 1
        return block

    def _validate_kv(self, key: Tensor, value: Tensor) -> None:
        """ValueError on anything incompatible, before any change."""
        if not isinstance(key, Tensor) or not isinstance(value, Tensor):
            raise ValueError("key and value must be tensors")
        if key.dim() != 3:
            raise ValueError(f"rank: key must be [Hkv, t, D], got {key.dim()} dims")
        if key.shape != value.shape:
            shapes = f"{tuple(key.shape)} vs {tuple(value.shape)}"
            raise ValueError(f"key and value shapes differ: {shapes}")
        kv_heads, t, head_dim = key.shape
        if t < 1:
            raise ValueError("time: an append needs at least one position")
        for name, got, want in (("kv_heads", kv_heads, self.kv_heads),
                                ("head_dim", head_dim, self.head_dim),
                                ("key dtype", key.dtype, self.dtype),
                                ("value dtype", value.dtype, self.dtype),
                                ("key device", key.device, self.device),
                                ("value device", value.device, self.device)):
            if got != want:
                raise ValueError(f"{name}: got {got}, the cache has {want}")
