"""Paged KV cache in another style: slot-major flat pools, a heap of free blocks, einsum attention.

Storage is one row per (block, slot): K and V pools are [num_blocks * block_size, Hkv, D], so
position p of a sequence is row table[p // block_size] * block_size + p % block_size. Free blocks
sit in a min-heap (the lowest free id is taken first). Each sequence is a small record with its
table, length, remaining reservation and the tick at which it was added (eviction takes the
highest tick). attend builds one flat row index [N, T] for the whole batch and gathers K and V
with it in one `index_select`; GQA is an einsum over a grouped view of the query.

Same contract as solutions/paged_kv_cache.py: fork shares blocks and gives dst no reservation;
an admitted sequence spends its reservation first, then unreserved free blocks.
"""

import heapq
import itertools
import math
from dataclasses import dataclass, field

import torch
from torch import Tensor


class CacheFull(RuntimeError):
    pass


@dataclass
class _Seq:
    tick: int
    table: list = field(default_factory=list)
    length: int = 0
    reserved: int = 0


class PagedKVCache:
    def __init__(self, num_blocks, block_size, kv_heads, head_dim, *, dtype=torch.float32,
                 device="cpu", quantize=None):
        if min(num_blocks, block_size, kv_heads, head_dim) < 1:
            raise ValueError("num_blocks, block_size, kv_heads and head_dim must be >= 1")
        if quantize not in (None, "int8"):
            raise ValueError(f"unsupported quantize {quantize!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.dtype, self.quantize = dtype, quantize
        rows = num_blocks * block_size
        store_dtype = torch.int8 if quantize == "int8" else dtype
        self._k = torch.zeros(rows, kv_heads, head_dim, dtype=store_dtype, device=device)
        self._v = torch.zeros_like(self._k)
        if quantize == "int8":
            self._ks = torch.zeros(rows, kv_heads, dtype=torch.float32, device=device)
            self._vs = torch.zeros_like(self._ks)
        else:
            self._ks = self._vs = None
        self.device = self._k.device
        self._heap = list(range(num_blocks))  # already a valid min-heap
        self._refcount = [0] * num_blocks
        self._seqs: dict[object, _Seq] = {}
        self._ticks = itertools.count()

    # ---- accounting
    @property
    def num_free_blocks(self) -> int:
        return len(self._heap)

    @property
    def pool_bytes(self) -> int:
        parts = [self._k, self._v] + ([self._ks, self._vs] if self._ks is not None else [])
        return sum(p.element_size() * p.nelement() for p in parts)

    def _spare(self) -> int:
        return len(self._heap) - sum(s.reserved for s in self._seqs.values())

    def _ceil_blocks(self, tokens) -> int:
        if tokens < 0:
            raise ValueError("token count must be >= 0")
        return math.ceil(tokens / self.block_size)

    def _seq(self, seq_id) -> _Seq:
        if seq_id not in self._seqs:
            raise KeyError(seq_id)
        return self._seqs[seq_id]

    def _new(self, seq_id, length=0, table=(), reserved=0):
        if seq_id in self._seqs:
            raise ValueError(f"duplicate sequence id {seq_id!r}")
        self._seqs[seq_id] = _Seq(next(self._ticks), list(table), length, reserved)

    # ---- lifecycle
    def add(self, seq_id) -> None:
        self._new(seq_id)

    def can_admit(self, num_tokens) -> bool:
        return self._spare() >= self._ceil_blocks(num_tokens)

    def admit(self, seq_id, max_tokens) -> bool:
        if seq_id in self._seqs:
            raise ValueError(f"duplicate sequence id {seq_id!r}")
        ok = self.can_admit(max_tokens)
        if ok:
            self._new(seq_id, reserved=self._ceil_blocks(max_tokens))
        return ok

    def fork(self, src, dst) -> None:
        s = self._seq(src)
        self._new(dst, s.length, s.table)
        for b in s.table:
            self._refcount[b] += 1

    def free(self, seq_id) -> None:
        self._seq(seq_id)  # KeyError for an unknown or already freed id
        s = self._seqs.pop(seq_id)
        for b in s.table:
            self._refcount[b] -= 1
            if not self._refcount[b]:
                heapq.heappush(self._heap, b)

    def evict(self):
        if not self._seqs:
            raise ValueError("nothing to evict")
        victim = max(self._seqs, key=lambda i: self._seqs[i].tick)
        self.free(victim)
        return victim

    def length(self, seq_id) -> int:
        return self._seq(seq_id).length

    def block_table(self, seq_id) -> list[int]:
        return list(self._seq(seq_id).table)

    # ---- writing
    def append(self, seq_id, key, value) -> None:
        s = self._seq(seq_id)
        if key.ndim != 3 or value.ndim != 3:
            raise ValueError("rank: key and value must be [kv_heads, t, head_dim]")
        if key.shape != value.shape:
            raise ValueError("key and value shapes differ")
        h, t, d = key.shape
        if h != self.kv_heads or d != self.head_dim or t == 0:
            raise ValueError(f"shape {tuple(key.shape)} incompatible with kv_heads "
                             f"{self.kv_heads}, head_dim {self.head_dim}, t >= 1")
        if {key.dtype, value.dtype} != {self.dtype}:
            raise ValueError(f"dtype: expected {self.dtype}")
        if key.device != self.device or value.device != self.device:
            raise ValueError(f"device: expected {self.device}")

        bs = self.block_size
        partial_shared = s.length % bs > 0 and self._refcount[s.table[-1]] > 1
        grow = self._ceil_blocks(s.length + t) - len(s.table)
        need = grow + partial_shared
        if need > s.reserved + self._spare():
            raise CacheFull(f"{need} blocks needed, {s.reserved + self._spare()} available")
        s.reserved = max(0, s.reserved - need)

        if partial_shared:
            old, new = s.table[-1], heapq.heappop(self._heap)
            self._refcount[old] -= 1
            self._refcount[new] = 1
            src = torch.arange(old * bs, old * bs + bs, device=self.device)
            dst = torch.arange(new * bs, new * bs + bs, device=self.device)
            for pool in filter(lambda p: p is not None, (self._k, self._v, self._ks, self._vs)):
                pool.index_copy_(0, dst, pool.index_select(0, src))
            s.table[-1] = new
        for _ in range(grow):
            b = heapq.heappop(self._heap)
            self._refcount[b] = 1
            s.table.append(b)

        rows = self._rows(s.table, s.length, s.length + t)  # [t]
        self._store(self._k, self._ks, rows, key.permute(1, 0, 2))
        self._store(self._v, self._vs, rows, value.permute(1, 0, 2))
        s.length += t

    def _rows(self, table, start, stop) -> Tensor:
        pos = torch.arange(start, stop)
        blocks = torch.as_tensor(table, dtype=torch.long)[pos // self.block_size]
        return (blocks * self.block_size + pos % self.block_size).to(self.device)

    @staticmethod
    def _store(pool, scales, rows, x):  # x: [t, Hkv, D]
        if scales is None:
            pool.index_copy_(0, rows, x)
            return
        # Each (token, head) row gets its own absmax scale: growth over time never clips.
        amax = x.float().abs().amax(-1, keepdim=True)  # [t, Hkv, 1]
        scale = torch.where(amax == 0, torch.ones_like(amax), amax / 127.0)
        q = torch.clamp(torch.round(x.float() / scale), -127, 127)
        pool.index_copy_(0, rows, q.to(torch.int8))
        scales.index_copy_(0, rows, scale.squeeze(-1))

    # ---- reading
    def attend(self, seq_ids, query) -> Tensor:
        seqs = [self._seq(i) for i in seq_ids]
        if not isinstance(query, Tensor) or query.ndim != 4 or query.shape[2] != 1:
            raise ValueError("rank: query must be [N, Hq, 1, D]")
        n, hq, _, d = query.shape
        if n != len(seqs):
            raise ValueError(f"batch: query has {n} rows for {len(seqs)} sequences")
        if d != self.head_dim:
            raise ValueError(f"head_dim: {d} != {self.head_dim}")
        if query.dtype != self.dtype or query.device != self.device:
            raise ValueError("dtype/device of the query differ from the cache's")
        if hq % self.kv_heads != 0:
            raise ValueError(f"heads: {hq} query heads, {self.kv_heads} kv heads")

        t_max = max((s.length for s in seqs), default=0)
        out = torch.zeros(n, hq, 1, d, dtype=torch.float32, device=self.device)
        if t_max == 0:
            return out.to(query.dtype)
        # One flat row index for every (sequence, position); past a sequence's end, row 0 stands
        # in and is masked out.
        flat = torch.zeros(n, t_max, dtype=torch.long)
        valid = torch.zeros(n, t_max, dtype=torch.bool)
        for i, s in enumerate(seqs):
            if s.length:
                flat[i, : s.length] = self._rows(s.table, 0, s.length).cpu()
                valid[i, : s.length] = True
        flat, valid = flat.to(self.device), valid.to(self.device)

        k = self._load(self._k, self._ks, flat.view(-1)).view(n, t_max, self.kv_heads, d)
        v = self._load(self._v, self._vs, flat.view(-1)).view(n, t_max, self.kv_heads, d)
        v = torch.where(valid[:, :, None, None], v, torch.zeros((), device=self.device))
        g = hq // self.kv_heads
        q = query.float().reshape(n, self.kv_heads, g, d)  # head h = kv * g + j
        logits = torch.einsum("nkgd,ntkd->nkgt", q, k) * (1.0 / math.sqrt(d))
        logits = torch.where(valid[:, None, None, :], logits, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        empty = torch.tensor([s.length == 0 for s in seqs], device=self.device)
        probs = probs.masked_fill(empty[:, None, None, None], 0.0)  # all -inf rows: NaN -> 0
        out = torch.einsum("nkgt,ntkd->nkgd", probs, v).reshape(n, hq, 1, d)
        return out.to(query.dtype)

    @staticmethod
    def _load(pool, scales, rows) -> Tensor:
        x = pool.index_select(0, rows).float()  # [R, Hkv, D]
        if scales is not None:
            x = x * scales.index_select(0, rows)[..., None]
        return x
