"""A correct cache of a second style for the real-model item: each append kept as its own chunk
in a list (no storage of a fixed capacity), read by concatenation, the query grouped per KV
head (no repeat of K and V). Rows of equal length only: `counts` other than all t raises
ValueError, as the contract allows for what an implementation does not support. A test fixture
of tests/test_real_model.py (section 8's names without a window).
"""

import math

import torch
from torch import Tensor


class KVCache:
    def __init__(self, capacity: int | None = None, window: int | None = None):
        if window is not None:
            raise ValueError("window: this cache has none")
        self.chunks: list[tuple[Tensor, Tensor]] = []  # [B, Hkv, t, D] each, in time order
        self.kept = 0  # positions of every row

    @property
    def keys(self) -> Tensor | None:  # [B, Hkv, T, D]
        return torch.cat([k for k, _ in self.chunks], dim=2)[:, :, : self.kept] if self.chunks else None

    @property
    def values(self) -> Tensor | None:  # [B, Hkv, T, D]
        return torch.cat([v for _, v in self.chunks], dim=2)[:, :, : self.kept] if self.chunks else None

    @property
    def lengths(self) -> Tensor | None:  # int64 [B]
        if not self.chunks:
            return None
        return torch.full((self.chunks[0][0].shape[0],), self.kept, dtype=torch.int64)

    positions = lengths

    @property
    def capacity(self) -> int:
        return sum(k.shape[2] for k, _ in self.chunks)


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    if new_key.dim() != 4 or new_key.shape != new_value.shape:
        raise ValueError(f"rank: key {tuple(new_key.shape)} and value {tuple(new_value.shape)}")
    if counts is not None and bool((counts != new_key.shape[2]).any()):
        raise ValueError("counts: rows of equal length only")
    if cache.chunks:
        first = cache.chunks[0][0]
        for name, got, want in (("batch", new_key.shape[0], first.shape[0]),
                                ("kv_heads", new_key.shape[1], first.shape[1]),
                                ("head_dim", new_key.shape[3], first.shape[3]),
                                ("dtype", new_key.dtype, first.dtype)):
            if got != want:
                raise ValueError(f"{name}: {got}, the cache has {want}")
    held = cache.capacity
    if held > cache.kept:  # positions truncate dropped: forget them before writing after
        keys, values = cache.keys, cache.values
        cache.chunks = [(keys.clone(), values.clone())]
    cache.chunks.append((new_key.clone(), new_value.clone()))
    cache.kept += new_key.shape[2]


def _attention(cache: KVCache, query: Tensor) -> Tensor:
    """Query [B, Hq, t, D], query i at position kept - t + i, attending positions 0 .. its own."""
    if not cache.chunks:
        raise ValueError("attend on an empty cache")
    batch, q_heads, t, head_dim = query.shape
    keys, values = cache.keys, cache.values  # [B, Hkv, T, D]
    if batch != keys.shape[0] or head_dim != keys.shape[3] or q_heads % keys.shape[1]:
        raise ValueError(f"query {tuple(query.shape)} against keys {tuple(keys.shape)}")
    if t > cache.kept:
        raise ValueError(f"time: {t} queries, {cache.kept} positions held")
    kv_heads = keys.shape[1]
    q = query.float().reshape(batch, kv_heads, q_heads // kv_heads * t, head_dim)  # grouped
    scores = q @ keys.float().transpose(-1, -2) * head_dim ** -0.5  # [B, Hkv, G*t, T]
    at = cache.kept - t + torch.arange(t).repeat(q_heads // kv_heads)  # [G*t]
    scores = scores.masked_fill(torch.arange(cache.kept) > at[:, None], -math.inf)
    out = torch.softmax(scores, dim=-1) @ values.float()  # [B, Hkv, G*t, D]
    return out.reshape(batch, q_heads, t, head_dim).to(query.dtype)


def attend(cache: KVCache, query: Tensor) -> Tensor:
    if query.dim() != 4 or query.shape[2] != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {tuple(query.shape)}")
    return _attention(cache, query)


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    if query.dim() != 4:
        raise ValueError(f"rank: query must be [B, Hq, t, D], got {tuple(query.shape)}")
    return _attention(cache, query)


def truncate(cache: KVCache, lengths: Tensor) -> None:
    if cache.lengths is None or lengths.shape != cache.lengths.shape:
        raise ValueError("truncate: one length per row")
    if bool((lengths != lengths[0]).any()) or not 0 <= int(lengths[0]) <= cache.kept:
        raise ValueError("truncate: equal lengths within the rows' current length")
    cache.kept = int(lengths[0])


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    cache.chunks = [(k.index_select(0, beam_idx), v.index_select(0, beam_idx))
                    for k, v in cache.chunks]


def reset(cache: KVCache) -> None:
    cache.chunks, cache.kept = [], 0


def release(cache: KVCache, index: int) -> None:
    raise ValueError("release: rows of equal length only")


def fork(cache: KVCache) -> KVCache:
    copy = KVCache()
    copy.chunks = [(k.clone(), v.clone()) for k, v in cache.chunks]
    copy.kept = cache.kept
    return copy
