"""A correct section-8 cache of the concatenation style (contract v1.3 section 8, no window),
written for the real-model item: it must pass it. A test fixture of tests/test_real_model.py
(kept apart from tests/implementations/*.py, which must reach L6: this one fails prealloc).

The cache is an object with methods; the contract's functions call them. K and V are one
tensor each that `torch.cat` lengthens whenever an append reaches past it (a new tensor the
size of the whole cache: a reallocation at nearly every step) and that truncate cuts back to
the longest row. Each row's new positions are written by a loop over the rows. One attention
serves attend and attend_chunk: query i of a chunk of t sits at lengths[b] - t + i and sees
positions up to its own; the query is grouped per KV head by einsum, K and V never repeated.
"""
import math

import torch
from torch import Tensor


class KVCache:
    """k, v: [B, Hkv, S, D], S = capacity >= max(lengths); rows past their length hold zeros
    or dropped positions, never read. `KVCache(capacity=N)`: S starts at N."""

    def __init__(self, capacity: int | None = None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.requested_capacity = capacity or 0
        self.clear()

    def clear(self) -> None:
        self.k: Tensor | None = None  # [B, Hkv, S, D]
        self.v: Tensor | None = None
        self.lengths: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    @property
    def positions(self) -> Tensor | None:  # int64 [B]: no window, so what each row holds
        return self.lengths

    @property
    def keys(self) -> Tensor | None:  # [B, Hkv, T, D], T = max(lengths)
        return None if self.k is None else self.k[:, :, : self.longest()]

    @property
    def values(self) -> Tensor | None:  # [B, Hkv, T, D]
        return None if self.v is None else self.v[:, :, : self.longest()]

    def longest(self) -> int:
        return int(self.lengths.max()) if self.lengths.numel() else 0

    def check(self, what: str, x: Tensor, heads: bool) -> None:
        """ValueError unless x ([B, H, t, D]) fits what the cache holds."""
        if self.k is None:
            return
        pairs = [("batch", x.shape[0], self.k.shape[0]), ("head_dim", x.shape[3], self.k.shape[3]),
                 ("dtype", x.dtype, self.k.dtype), ("device", x.device, self.k.device)]
        if heads:
            pairs.append(("kv_heads", x.shape[1], self.k.shape[1]))
        for name, got, held in pairs:
            if got != held:
                raise ValueError(f"{name}: the {what} has {got}, the cache {held}")

    def lengthen(self, slots: int, like: Tensor) -> None:
        """Make S at least `slots`, by concatenating zeros after what is held."""
        if self.k is None:
            shape = (like.shape[0], like.shape[1], max(slots, self.requested_capacity), like.shape[3])
            self.k, self.v = like.new_zeros(shape), like.new_zeros(shape)
            self.lengths = torch.zeros(like.shape[0], dtype=torch.int64, device=like.device)
        elif slots > self.capacity:
            more = self.k.new_zeros(*self.k.shape[:2], slots - self.capacity, self.k.shape[3])
            self.k = torch.cat([self.k, more], dim=2)
            self.v = torch.cat([self.v, more], dim=2)

    def write(self, new_key: Tensor, new_value: Tensor, counts: Tensor) -> None:
        """Row b's first counts[b] new positions after its lengths[b]."""
        held = self.lengths if self.lengths is not None else torch.zeros_like(counts)  # [B]
        grown = held + counts
        self.lengthen(int(grown.max()), new_key)
        for b, (start, n) in enumerate(zip(held.tolist(), counts.tolist())):
            self.k[b, :, start : start + n] = new_key[b, :, :n]
            self.v[b, :, start : start + n] = new_value[b, :, :n]
        self.lengths = grown

    def attention(self, query: Tensor) -> Tensor:
        """query [B, Hq, t, D], query i of row b at position lengths[b] - t + i -> [B, Hq, t, D]."""
        batch, q_heads, t, dim = query.shape
        kv_heads = self.k.shape[1]
        keys, values = self.keys.float(), self.values.float()  # [B, Hkv, T, D]
        q = query.float().view(batch, kv_heads, q_heads // kv_heads, t, dim)  # [B, Hkv, G, t, D]
        scores = torch.einsum("bhgtd,bhsd->bhgts", q, keys) / math.sqrt(dim)  # [B, Hkv, G, t, T]
        own = self.lengths[:, None] - t + torch.arange(t, device=query.device)  # [B, t]
        after = torch.arange(keys.shape[2], device=query.device) > own[..., None]  # [B, t, T]
        scores = scores.masked_fill(after[:, None, None], -math.inf)
        weights = torch.softmax(scores, dim=-1)
        weights = weights.masked_fill((self.lengths == 0)[:, None, None, None, None], 0.0)  # no NaN
        out = torch.einsum("bhgts,bhsd->bhgtd", weights, values)  # [B, Hkv, G, t, D]
        return out.reshape(batch, q_heads, t, dim).to(query.dtype)


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    """Row b appends new_key[b, :, :counts[b]] (default all t) after its lengths[b]; ValueError
    on anything incompatible, the cache unchanged."""
    if new_key.dim() != 4 or new_key.shape != new_value.shape:
        raise ValueError(f"rank: key {tuple(new_key.shape)}, value {tuple(new_value.shape)}")
    if new_key.dtype != new_value.dtype or new_key.device != new_value.device:
        raise ValueError("key and value dtype or device differ")
    batch, _, t, _ = new_key.shape
    if t < 1:
        raise ValueError("time: an append needs at least one position")
    cache.check("new key", new_key, heads=True)
    if counts is None:
        counts = torch.full((batch,), t, dtype=torch.int64)
    elif not isinstance(counts, Tensor) or counts.dtype != torch.int64 or counts.shape != (batch,):
        raise ValueError(f"counts must be an int64 tensor [{batch}]")
    elif bool((counts < 0).any() | (counts > t).any()):
        raise ValueError(f"counts range: each in 0..{t}")
    cache.write(new_key, new_value, counts.to(new_key.device))


def _query(cache: KVCache, query: Tensor, name: str) -> None:
    if cache.k is None:
        raise ValueError(f"{name} on an empty cache: append first")
    if query.dim() != 4:
        raise ValueError(f"rank: query must be [B, Hq, t, D], got {tuple(query.shape)}")
    cache.check("query", query, heads=False)
    if query.shape[1] % cache.k.shape[1]:
        raise ValueError(f"heads: {query.shape[1]} query heads over {cache.k.shape[1]} kv heads")


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """The newest query [B, Hq, 1, D] over each row's positions; a row of length 0 gives zeros."""
    _query(cache, query, "attend")
    if query.shape[2] != 1:
        raise ValueError(f"time: attend takes one query, got {query.shape[2]}")
    return cache.attention(query)


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    """The queries [B, Hq, t, D] of the t positions each row appended last, causally masked."""
    _query(cache, query, "attend_chunk")
    held = cache.lengths[cache.lengths > 0]
    if held.numel() and int(held.min()) < query.shape[2]:
        raise ValueError(f"time: {query.shape[2]} queries, a row holds {int(held.min())}")
    return cache.attention(query)


def truncate(cache: KVCache, lengths: Tensor) -> None:
    """Row b keeps positions 0 .. lengths[b] - 1; S is cut back to the longest."""
    if cache.lengths is None:
        raise ValueError("truncate on an empty cache")
    if not isinstance(lengths, Tensor) or lengths.dtype != torch.int64 or lengths.shape != cache.lengths.shape:
        raise ValueError(f"lengths must be an int64 tensor {list(cache.lengths.shape)}")
    lengths = lengths.to(cache.lengths.device)
    if bool((lengths < 0).any() | (lengths > cache.lengths).any()):
        raise ValueError("lengths must be within 0 .. each row's length")
    cache.lengths = lengths.clone()
    cache.k = cache.k[:, :, : cache.longest()]
    cache.v = cache.v[:, :, : cache.longest()]


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """New row j is old row beam_idx[j] (int64 [B'])."""
    if cache.k is None:
        raise ValueError("reorder on an empty cache")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    beam_idx = beam_idx.to(cache.k.device)
    cache.k = cache.k[beam_idx]
    cache.v = cache.v[beam_idx]
    cache.lengths = cache.lengths[beam_idx]


def reset(cache: KVCache) -> None:
    cache.clear()


def release(cache: KVCache, index: int) -> None:
    """Row `index` holds nothing from now on; the others are untouched."""
    if cache.lengths is None:
        raise ValueError("release on an empty cache")
    if not 0 <= index < len(cache.lengths):
        raise IndexError(f"release: no row {index} in a batch of {len(cache.lengths)}")
    cache.lengths = cache.lengths.clone()
    cache.lengths[index] = 0


def fork(cache: KVCache) -> KVCache:
    twin = KVCache(cache.requested_capacity)
    if cache.k is not None:
        twin.k, twin.v, twin.lengths = cache.k.clone(), cache.v.clone(), cache.lengths.clone()
    return twin


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """x [B, H, T, D] rotated at positions int64 [B, T], rotate-half pairs (i, i + D/2)."""
    half = x.shape[-1] // 2
    freq = 1.0 / base ** (torch.arange(half, device=x.device, dtype=torch.float32) * 2 / x.shape[-1])
    angle = positions.to(x.device, torch.float32)[:, None, :, None] * freq  # [B, 1, T, D/2]
    cos, sin = angle.cos(), angle.sin()
    lo, hi = x.float()[..., :half], x.float()[..., half:]
    return torch.cat([lo * cos - hi * sin, hi * cos + lo * sin], dim=-1).to(x.dtype)


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """x [B, 1, d_model] -> [B, 1, d_model]: project, rotate at each row's length, append, attend."""
    if x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {tuple(x.shape)}")
    batch = x.shape[0]
    if cache.lengths is not None and len(cache.lengths) != batch:
        raise ValueError(f"batch: x has {batch}, the cache {len(cache.lengths)}")

    def heads(proj, n):  # [B, n, 1, D]
        return proj(x).view(batch, 1, n, layer.head_dim).transpose(1, 2)

    at = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    at = at.to(x.device)[:, None]  # [B, 1]: each row's next position
    q = apply_rope(heads(layer.wq, layer.n_heads), at, layer.rope_base)
    k = apply_rope(heads(layer.wk, layer.n_kv_heads), at, layer.rope_base)
    append(cache, k, heads(layer.wv, layer.n_kv_heads), counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, layer.n_heads * layer.head_dim))
