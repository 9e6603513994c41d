"""KV cache on uninitialized storage whose attention reads each row's own prefix only.

Storage is one [B, Hkv, capacity, D] buffer per K and V from `torch.empty`: nothing is zeroed, so
a slot nobody wrote holds whatever the allocator returned (NaN, when the grader's worker fills new
memory). That is safe because no slot past a row's length is ever read: attend loops over the
rows and attends row b over keys[b, :, :lengths[b]] alone, with no mask (and so no 0 * NaN).
Capacity starts at KVCache(capacity=N) or what the first append needs and doubles when a row
would overflow; the old slots are copied into the new buffer, unwritten ones included, harmlessly.
GQA: the query is viewed as [Hkv, G, D] groups, so K and V keep kv_heads heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                     or capacity < 0):
            raise ValueError(f"capacity must be None or an int >= 0, got {capacity!r}")
        self.requested = capacity or 0
        self.k_buf: Tensor | None = None  # [B, Hkv, capacity, D], uninitialized past lengths
        self.v_buf: Tensor | None = None
        self.lengths: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return 0 if self.k_buf is None else self.k_buf.shape[2]

    @property
    def keys(self) -> Tensor | None:  # [B, Hkv, max(lengths), D]; row b valid up to lengths[b]
        return None if self.k_buf is None else self.k_buf[:, :, : int(self.lengths.max())]

    @property
    def values(self) -> Tensor | None:
        return None if self.v_buf is None else self.v_buf[:, :, : int(self.lengths.max())]


def _check_append(cache: KVCache, key: Tensor, value: Tensor, counts) -> list[int]:
    """Per-row counts as ints; ValueError, nothing changed, on anything incompatible."""
    if not isinstance(key, Tensor) or not isinstance(value, Tensor):
        raise ValueError("append expects tensors for key and value")
    if key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"rank: key and value must be [B, Hkv, t, D], got {key.dim()}-d")
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} shapes differ")
    if key.dtype != value.dtype or key.device != value.device:
        raise ValueError("key and value dtype or device differ")
    batch, heads, t, dim = key.shape
    if t < 1:
        raise ValueError("time: an append needs t >= 1")
    if cache.k_buf is not None:
        for name, got, want in (("batch", batch, cache.k_buf.shape[0]),
                                ("kv_heads", heads, cache.k_buf.shape[1]),
                                ("head_dim", dim, cache.k_buf.shape[3]),
                                ("dtype", key.dtype, cache.k_buf.dtype),
                                ("device", key.device, cache.k_buf.device)):
            if got != want:
                raise ValueError(f"{name}: append has {got}, cache has {want}")
    if counts is None:
        return [t] * batch
    if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        raise ValueError("counts dtype: counts must be an int64 tensor")
    if tuple(counts.shape) != (batch,):
        raise ValueError(f"counts shape: expected [{batch}], got {list(counts.shape)}")
    if counts.device.type == "meta":
        raise ValueError("counts device: meta tensors hold no values")
    per_row = counts.tolist()
    if any(not 0 <= c <= t for c in per_row):
        raise ValueError(f"counts range: each must be in 0..{t}, got {per_row}")
    return per_row


def _grow(cache: KVCache, needed: int, like: Tensor) -> None:
    """At least `needed` slots: the requested capacity first, then doubling."""
    if cache.k_buf is not None and needed <= cache.capacity:
        return
    slots = max(cache.requested, 1) if cache.k_buf is None else cache.capacity
    while slots < needed:
        slots *= 2
    batch, heads, _, dim = like.shape
    k = like.new_empty(batch, heads, slots, dim)  # [B, Hkv, slots, D]: never read past lengths
    v = like.new_empty(batch, heads, slots, dim)
    if cache.k_buf is not None:
        k[:, :, : cache.capacity] = cache.k_buf
        v[:, :, : cache.capacity] = cache.v_buf
    cache.k_buf, cache.v_buf = k, v


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Row b writes new_key[b, :, :counts[b]] at lengths[b].. (counts default all t)."""
    per_row = _check_append(cache, new_key, new_value, counts)
    before = [0] * len(per_row) if cache.lengths is None else cache.lengths.tolist()
    after = [n + c for n, c in zip(before, per_row)]
    _grow(cache, max(after), new_key)
    for b, (start, count) in enumerate(zip(before, per_row)):
        cache.k_buf[b, :, start : start + count] = new_key[b, :, :count]
        cache.v_buf[b, :, start : start + count] = new_value[b, :, :count]
    cache.lengths = torch.tensor(after, dtype=torch.int64, device=new_key.device)


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """Row b over its own lengths[b] positions: float32 scores and softmax; zeros for length 0.
    query [B, Hq, 1, D] -> [B, Hq, 1, D] in the query's dtype."""
    if cache.k_buf is None:
        raise ValueError("attend on an empty cache")
    if not isinstance(query, Tensor) or query.dim() != 4 or query.shape[2] != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {getattr(query, 'shape', None)}")
    batch, q_heads, _, dim = query.shape
    kv_heads = cache.k_buf.shape[1]
    for name, got, want in (("batch", batch, cache.k_buf.shape[0]),
                            ("head_dim", dim, cache.k_buf.shape[3]),
                            ("dtype", query.dtype, cache.k_buf.dtype),
                            ("device", query.device, cache.k_buf.device)):
        if got != want:
            raise ValueError(f"{name}: query has {got}, cache has {want}")
    if q_heads % kv_heads:
        raise ValueError(f"heads: {q_heads} query heads are not a multiple of {kv_heads}")
    groups = q_heads // kv_heads
    out = torch.zeros(batch, kv_heads, groups, dim, dtype=torch.float32, device=query.device)
    for b, n in enumerate(cache.lengths.tolist()):
        if n == 0:
            continue  # a row of length 0 returns zeros
        q = query[b].reshape(kv_heads, groups, dim).float()  # [Hkv, G, D]
        keys = cache.k_buf[b, :, :n].float()  # [Hkv, n, D]: this row's written slots only
        scores = q @ keys.transpose(-1, -2) / math.sqrt(dim)  # [Hkv, G, n]
        weights = torch.softmax(scores, dim=-1)
        out[b] = weights @ cache.v_buf[b, :, :n].float()  # [Hkv, G, D]
    return out.reshape(batch, q_heads, 1, dim).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.k_buf = cache.v_buf = cache.lengths = None


def release(cache: KVCache, index: int) -> None:
    """Row `index` ends: length 0; its slots keep stale data that attend never reads."""
    if cache.lengths is None:
        raise ValueError("release on an empty cache")
    if not 0 <= index < cache.lengths.shape[0]:
        raise IndexError(f"release: no row {index}")
    lengths = cache.lengths.clone()
    lengths[index] = 0
    cache.lengths = lengths


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    if cache.k_buf is None:
        raise ValueError("reorder on an empty cache")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    cache.k_buf = cache.k_buf.index_select(0, beam_idx)  # [B', Hkv, capacity, D]
    cache.v_buf = cache.v_buf.index_select(0, beam_idx)
    cache.lengths = cache.lengths.index_select(0, beam_idx)


def fork(cache: KVCache) -> KVCache:
    copy = KVCache(cache.requested)
    if cache.k_buf is not None:
        copy.k_buf, copy.v_buf = cache.k_buf.clone(), cache.v_buf.clone()
        copy.lengths = cache.lengths.clone()
    return copy


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary embedding, rotate-half convention (given in the starter). x: [B, H, T, D],
    positions: int64 [B, T]; computed in float32, returned in x's dtype."""
    head_dim = x.shape[-1]
    even = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32)  # [D/2]
    inv_freq = base ** (-even / head_dim)
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D]
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * emb.cos() + rotated * emb.sin()).to(x.dtype)


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """x [B, 1, d_model] -> [B, 1, d_model]: project the new token, RoPE at lengths[b], append,
    attend, wo."""
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {getattr(x, 'shape', None)}")
    batch = x.shape[0]
    if cache.lengths is not None and cache.lengths.shape[0] != batch:
        raise ValueError(f"batch: x has {batch}, cache has {cache.lengths.shape[0]}")
    heads, kv_heads, dim = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(batch, 1, heads, dim).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(batch, 1, kv_heads, dim).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(batch, 1, kv_heads, dim).transpose(1, 2)
    lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    positions = lengths.to(x.device)[:, None]  # [B, 1]
    q = apply_rope(q, positions, layer.rope_base)
    k = apply_rope(k, positions, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * dim))
