"""Paged KV cache in vLLM's style: token-major blocks, a FIFO of free blocks, a padded block table.

The K and V pools are [num_blocks, block_size, Hkv, D]: one position of one block is a
contiguous [Hkv, D] slab. Free block ids wait in a FIFO (taken from the front, returned at the
back, as vLLM's free block queue does), so block ids are reused in a different order than the
solution's. Reference counts live in an int32 tensor, one per block. attend builds vLLM's
`block_tables` ([N, max blocks], padded with block 0) and `context_lens`, gathers every row's
blocks at once, and zeroes what lies past each row's length before the einsums: the padding reads
real blocks, whose contents may be anything (even memory never written).

Same contract as solutions/paged_kv_cache.py: fork shares blocks and gives dst no reservation;
an admitted sequence spends its reservation first, then unreserved free blocks.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass, field

import torch
from torch import Tensor


class CacheFull(RuntimeError):
    pass


@dataclass
class _Sequence:
    order: int  # when it was added: evict takes the largest
    blocks: list[int] = field(default_factory=list)
    length: int = 0
    reserved: int = 0  # blocks still promised to it (admitted sequences only)


class PagedKVCache:
    def __init__(self, num_blocks, block_size, kv_heads, head_dim, *, dtype=torch.float32,
                 device="cpu", quantize=None):
        if quantize not in (None, "int8"):
            raise ValueError(f"quantize must be None or 'int8', got {quantize!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.dtype, self.device, self.quantize = dtype, torch.device(device), quantize
        stored = torch.int8 if quantize else dtype
        shape = (num_blocks, block_size, kv_heads, head_dim)
        self.k_pool = torch.empty(shape, dtype=stored, device=device)
        self.v_pool = torch.empty(shape, dtype=stored, device=device)
        self.k_scale = self.v_scale = None
        if quantize:
            self.k_scale = torch.empty(shape[:3], dtype=torch.float32, device=device)
            self.v_scale = torch.empty(shape[:3], dtype=torch.float32, device=device)
        self.ref_count = torch.zeros(num_blocks, dtype=torch.int32)
        self.free_queue = deque(range(num_blocks))
        self.sequences: dict = {}
        self._order = itertools.count()

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def pool_bytes(self) -> int:
        tensors = [self.k_pool, self.v_pool, self.k_scale, self.v_scale]
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)

    # -- sequences -------------------------------------------------------------------------------

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def _unreserved(self) -> int:
        return self.num_free_blocks - sum(s.reserved for s in self.sequences.values())

    def _get(self, seq_id) -> _Sequence:
        if seq_id not in self.sequences:
            raise KeyError(seq_id)
        return self.sequences[seq_id]

    def add(self, seq_id) -> None:
        if seq_id in self.sequences:
            raise ValueError(f"sequence {seq_id!r} is already present")
        self.sequences[seq_id] = _Sequence(next(self._order))

    def can_admit(self, num_tokens: int) -> bool:
        return self._blocks_for(num_tokens) <= self._unreserved()

    def admit(self, seq_id, max_tokens: int) -> bool:
        if seq_id in self.sequences:
            raise ValueError(f"sequence {seq_id!r} is already present")
        if not self.can_admit(max_tokens):
            return False
        self.add(seq_id)
        self.sequences[seq_id].reserved = self._blocks_for(max_tokens)
        return True

    def fork(self, src, dst) -> None:
        source = self._get(src)
        self.add(dst)
        twin = self.sequences[dst]
        twin.blocks, twin.length = list(source.blocks), source.length
        for block in twin.blocks:
            self.ref_count[block] += 1

    def free(self, seq_id) -> None:
        sequence = self._get(seq_id)
        del self.sequences[seq_id]
        for block in sequence.blocks:
            self.ref_count[block] -= 1
            if self.ref_count[block] == 0:
                self.free_queue.append(block)

    def evict(self):
        if not self.sequences:
            raise ValueError("no sequence to evict")
        victim = max(self.sequences, key=lambda s: self.sequences[s].order)
        self.free(victim)
        return victim

    def length(self, seq_id) -> int:
        return self._get(seq_id).length

    def block_table(self, seq_id) -> list[int]:
        return list(self._get(seq_id).blocks)

    # -- writing ---------------------------------------------------------------------------------

    def _take(self, sequence: _Sequence) -> int:
        if sequence.reserved:
            sequence.reserved -= 1
        block = self.free_queue.popleft()
        self.ref_count[block] = 1
        return block

    def append(self, seq_id, key: Tensor, value: Tensor) -> None:
        sequence = self._get(seq_id)
        self._check_kv(key, value)
        t, start = key.shape[1], sequence.length
        shared_tail = start % self.block_size != 0 and int(self.ref_count[sequence.blocks[-1]]) > 1
        needed = shared_tail + self._blocks_for(start + t) - len(sequence.blocks)
        if needed > sequence.reserved + self._unreserved():
            raise CacheFull(f"{seq_id!r} needs {needed} blocks; {self.num_free_blocks} are free")
        if shared_tail:  # copy-on-write: the partly filled last block is another's too
            old = sequence.blocks[-1]
            new = self._take(sequence)
            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):
                if pool is not None:
                    pool[new] = pool[old]
            self.ref_count[old] -= 1
            sequence.blocks[-1] = new
        while len(sequence.blocks) < self._blocks_for(start + t):
            sequence.blocks.append(self._take(sequence))
        positions = torch.arange(start, start + t)
        blocks = torch.tensor(sequence.blocks)[positions // self.block_size]  # [t]
        slots = positions % self.block_size
        self._store(self.k_pool, self.k_scale, blocks, slots, key.transpose(0, 1))
        self._store(self.v_pool, self.v_scale, blocks, slots, value.transpose(0, 1))
        sequence.length = start + t

    def _store(self, pool, scale, blocks, slots, x):  # x: [t, Hkv, D]
        if scale is None:
            pool[blocks, slots] = x
            return
        absmax = x.float().abs().amax(dim=-1)  # [t, Hkv]
        step = torch.where(absmax > 0, absmax / 127, torch.ones_like(absmax))
        pool[blocks, slots] = (x.float() / step[..., None]).round().clamp(-127, 127).to(torch.int8)
        scale[blocks, slots] = step

    def _check_kv(self, key, value) -> None:
        for name, t in (("key", key), ("value", value)):
            if not isinstance(t, Tensor) or t.dim() != 3:
                raise ValueError(f"rank: {name} must be [kv_heads, t, head_dim]")
        if key.shape != value.shape:
            raise ValueError(f"shape: key {tuple(key.shape)} and value {tuple(value.shape)} differ")
        heads, t, dim = key.shape
        if t < 1:
            raise ValueError("t: an append needs at least one position")
        for name, got, want in (("kv_heads", heads, self.kv_heads), ("head_dim", dim, self.head_dim),
                                ("dtype", key.dtype, self.dtype), ("dtype", value.dtype, self.dtype),
                                ("device", key.device, self.device),
                                ("device", value.device, self.device)):
            if got != want:
                raise ValueError(f"{name}: the cache has {want}, the append {got}")

    # -- reading ---------------------------------------------------------------------------------

    def attend(self, seq_ids, query: Tensor) -> Tensor:
        sequences = [self._get(s) for s in seq_ids]
        if not isinstance(query, Tensor) or query.dim() != 4 or query.shape[2] != 1:
            raise ValueError("rank: query must be [N, Hq, 1, head_dim]")
        n, q_heads, _, dim = query.shape
        for name, got, want in (("batch", n, len(sequences)), ("head_dim", dim, self.head_dim),
                                ("dtype", query.dtype, self.dtype),
                                ("device", query.device, self.device)):
            if got != want:
                raise ValueError(f"{name}: expected {want}, the query has {got}")
        if q_heads == 0 or q_heads % self.kv_heads:
            raise ValueError(f"heads: {q_heads} query heads for {self.kv_heads} kv_heads")

        context_lens = torch.tensor([s.length for s in sequences])  # [N]
        width = max(1, max(len(s.blocks) for s in sequences)) if sequences else 1
        block_tables = torch.zeros(n, width, dtype=torch.int64)  # padded with block 0
        for row, s in enumerate(sequences):
            block_tables[row, : len(s.blocks)] = torch.tensor(s.blocks, dtype=torch.int64)
        keys = self._load(self.k_pool, self.k_scale, block_tables)  # [N, T, Hkv, D]
        values = self._load(self.v_pool, self.v_scale, block_tables)
        valid = torch.arange(keys.shape[1]) < context_lens[:, None]  # [N, T]
        keys = torch.where(valid[:, :, None, None], keys, 0.0)  # padding may hold anything
        values = torch.where(valid[:, :, None, None], values, 0.0)

        q = query.float().reshape(n, self.kv_heads, q_heads // self.kv_heads, dim)  # [N, Hkv, G, D]
        scores = torch.einsum("nhgd,nthd->nhgt", q, keys) / math.sqrt(dim)  # [N, Hkv, G, T]
        scores = scores.masked_fill(~valid[:, None, None], float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # length 0: all -inf, zeros
        out = torch.einsum("nhgt,nthd->nhgd", weights, values)  # [N, Hkv, G, D]
        return out.reshape(n, q_heads, 1, dim).to(query.dtype)

    def _load(self, pool, scale, block_tables) -> Tensor:
        """Every row's blocks in table order, as float32 [N, width * block_size, Hkv, D]."""
        n, width = block_tables.shape
        x = pool[block_tables].float()  # [N, width, block_size, Hkv, D]
        if scale is not None:
            x = x * scale[block_tables][..., None]
        return x.reshape(n, width * self.block_size, self.kv_heads, self.head_dim)
