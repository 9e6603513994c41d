"""KV cache with 1.5x geometric growth and a per-row append loop.

Storage: `cache.k_store`, `cache.v_store` ([B, Hkv, slots, D]) and `cache.len_store` (int64 [B]).
When some row would run past the last slot, the storage grows to max(needed, ceil(1.5 * slots)),
which still gives O(log n) reallocations for n single-token appends. Each row's new positions
are written by a plain Python loop over the batch. Attention uses einsum on the query reshaped
into [B, Hkv, G, D] groups, so the stored K and V keep kv_heads heads and are never expanded.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

GROWTH = 1.5


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None:
            if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
                raise ValueError(f"capacity must be a non-negative int or None, got {capacity!r}")
        self.first_capacity = capacity
        self.k_store: Tensor | None = None
        self.v_store: Tensor | None = None
        self.len_store: Tensor | None = None

    @property
    def keys(self):
        if self.k_store is None:
            return None
        return self.k_store.narrow(2, 0, _longest(self))

    @property
    def values(self):
        if self.v_store is None:
            return None
        return self.v_store.narrow(2, 0, _longest(self))

    @property
    def lengths(self):
        return self.len_store

    @property
    def capacity(self) -> int:
        return 0 if self.k_store is None else self.k_store.size(2)


def _longest(cache: KVCache) -> int:
    return int(cache.len_store.max().item()) if cache.len_store.numel() else 0


def _validate_append(cache, key, value, counts) -> list[int]:
    """Return the per-row counts as Python ints; ValueError (nothing touched) on any problem."""
    if not isinstance(key, Tensor) or not isinstance(value, Tensor):
        raise ValueError("append expects tensors for key and value")
    if key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"rank: expected [B, Hkv, t, D] key and value, got {key.dim()}-d and "
                         f"{value.dim()}-d")
    if key.shape != value.shape:
        raise ValueError(f"key {tuple(key.shape)} and value {tuple(value.shape)} shapes differ")
    if key.dtype != value.dtype or key.device != value.device:
        raise ValueError(f"key ({key.dtype}, {key.device}) and value ({value.dtype}, "
                         f"{value.device}) differ in dtype or device")
    if not torch.is_floating_point(key):
        raise ValueError(f"dtype: expected floating point keys, got {key.dtype}")
    batch, heads, t, dim = key.shape
    if t < 1:
        raise ValueError("time: t must be >= 1")
    store = cache.k_store
    if store is not None:
        if batch != store.size(0):
            raise ValueError(f"batch mismatch: {batch} vs cache {store.size(0)}")
        if heads != store.size(1):
            raise ValueError(f"kv_heads mismatch: {heads} vs cache {store.size(1)}")
        if dim != store.size(3):
            raise ValueError(f"head_dim mismatch: {dim} vs cache {store.size(3)}")
        if key.dtype != store.dtype:
            raise ValueError(f"dtype mismatch: {key.dtype} vs cache {store.dtype}")
        if key.device != store.device:
            raise ValueError(f"device mismatch: {key.device} vs cache {store.device}")
    if counts is None:
        return [t] * batch
    if not isinstance(counts, Tensor):
        raise ValueError("counts must be an int64 tensor")
    if counts.dtype is not torch.int64:
        raise ValueError(f"counts dtype {counts.dtype}, expected torch.int64")
    if counts.dim() != 1 or counts.size(0) != batch:
        raise ValueError(f"counts shape {list(counts.shape)}, expected [{batch}]")
    if counts.device.type == "meta":
        raise ValueError("counts on the meta device have no values")
    per_row = [int(c) for c in counts.tolist()]
    bad = [c for c in per_row if not 0 <= c <= t]
    if bad:
        raise ValueError(f"counts range: values {bad} outside 0..{t}")
    return per_row


def _grow_to(cache: KVCache, needed: int, template: Tensor) -> None:
    current = cache.capacity
    if cache.k_store is not None and needed <= current:
        return
    if cache.k_store is None:
        slots = cache.first_capacity if cache.first_capacity is not None else needed
        if slots < needed:
            slots = max(needed, math.ceil(slots * GROWTH))
    else:
        slots = max(needed, math.ceil(current * GROWTH), current + 1)
    b, h, _, d = template.shape
    fresh_k = torch.zeros((b, h, slots, d), dtype=template.dtype, device=template.device)
    fresh_v = torch.zeros_like(fresh_k)
    if cache.k_store is not None:
        fresh_k.narrow(2, 0, current).copy_(cache.k_store)
        fresh_v.narrow(2, 0, current).copy_(cache.v_store)
    cache.k_store, cache.v_store = fresh_k, fresh_v


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    per_row = _validate_append(cache, new_key, new_value, counts)
    batch = new_key.size(0)
    before = cache.len_store.tolist() if cache.len_store is not None else [0] * batch
    after = [a + c for a, c in zip(before, per_row)]
    _grow_to(cache, max(after, default=0), new_key)
    for b in range(batch):
        c = per_row[b]
        if c == 0:
            continue
        start = before[b]
        cache.k_store[b, :, start : start + c] = new_key[b, :, :c]
        cache.v_store[b, :, start : start + c] = new_value[b, :, :c]
    cache.len_store = torch.tensor(after, dtype=torch.int64, device=new_key.device)


def attend(cache: KVCache, query: Tensor) -> Tensor:
    if cache.k_store is None:
        raise ValueError("attend: the cache is empty")
    if not isinstance(query, Tensor) or query.dim() != 4 or query.size(2) != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {getattr(query, 'shape', None)}")
    batch, q_heads, _, dim = query.shape
    store = cache.k_store
    kv_heads = store.size(1)
    if batch != store.size(0):
        raise ValueError(f"batch mismatch: query {batch} vs cache {store.size(0)}")
    if dim != store.size(3):
        raise ValueError(f"head_dim mismatch: query {dim} vs cache {store.size(3)}")
    if q_heads < 1 or q_heads % kv_heads:
        raise ValueError(f"heads: {q_heads} query heads do not divide into {kv_heads} kv_heads")
    if query.dtype != store.dtype:
        raise ValueError(f"dtype mismatch: query {query.dtype} vs cache {store.dtype}")
    if query.device != store.device:
        raise ValueError(f"device mismatch: query {query.device} vs cache {store.device}")

    lengths = cache.len_store
    span = _longest(cache)
    if span == 0:
        return query.new_zeros(query.shape)
    acc = torch.promote_types(query.dtype, torch.float32)
    groups = q_heads // kv_heads
    q = query.reshape(batch, kv_heads, groups, dim).to(acc)  # head h -> (h // G, h % G)
    k = cache.k_store[:, :, :span].to(acc)
    v = cache.v_store[:, :, :span].to(acc)
    scores = torch.einsum("bngd,bntd->bngt", q, k) / math.sqrt(dim)
    outside = torch.arange(span, device=query.device).expand(batch, span) >= lengths.unsqueeze(1)
    scores = scores.masked_fill(outside[:, None, None, :], -math.inf)
    probs = torch.softmax(scores, dim=-1)  # subtracts the row max: safe for huge logits
    probs = torch.nan_to_num(probs, nan=0.0)  # rows of length 0 (all -inf) give NaN -> 0
    probs = probs.masked_fill(outside[:, None, None, :], 0.0)
    out = torch.einsum("bngt,bntd->bngd", probs, v)
    return out.reshape(batch, q_heads, 1, dim).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.k_store = None
    cache.v_store = None
    cache.len_store = None


def release(cache: KVCache, index: int) -> None:
    if cache.len_store is None:
        raise ValueError("release: the cache is empty")
    batch = cache.len_store.size(0)
    i = int(index)
    if not 0 <= i < batch:
        raise IndexError(f"release: row {index} not in 0..{batch - 1}")
    updated = cache.len_store.clone()
    updated[i] = 0
    cache.len_store = updated
    cache.k_store[i].zero_()
    cache.v_store[i].zero_()


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    if cache.k_store is None:
        raise ValueError("reorder: the cache is empty")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be an int64 tensor of shape [B']")
    rows = beam_idx.tolist()
    batch = cache.k_store.size(0)
    if not rows or any(r < 0 or r >= batch for r in rows):
        raise ValueError(f"beam_idx {rows} must be non-empty and within 0..{batch - 1}")
    sel = beam_idx.to(cache.k_store.device)
    cache.k_store = torch.index_select(cache.k_store, 0, sel)
    cache.v_store = torch.index_select(cache.v_store, 0, sel)
    cache.len_store = torch.index_select(cache.len_store, 0, sel)


def fork(cache: KVCache) -> KVCache:
    branch = KVCache(cache.first_capacity)
    for name in ("k_store", "v_store", "len_store"):
        t = getattr(cache, name)
        setattr(branch, name, None if t is None else t.clone())
    return branch


def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 3 or x.size(1) != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {getattr(x, 'shape', None)}")
    batch = x.size(0)
    if cache.len_store is not None and cache.len_store.size(0) != batch:
        raise ValueError(f"batch mismatch: x {batch} vs cache {cache.len_store.size(0)}")
    hq, hkv, d = layer.n_heads, layer.n_kv_heads, layer.head_dim
    with torch.no_grad():
        q = layer.wq(x).reshape(batch, 1, hq, d).permute(0, 2, 1, 3)  # [B, Hq, 1, D]
        k = layer.wk(x).reshape(batch, 1, hkv, d).permute(0, 2, 1, 3)  # [B, Hkv, 1, D]
        v = layer.wv(x).reshape(batch, 1, hkv, d).permute(0, 2, 1, 3)
        if cache.len_store is None:
            pos = torch.zeros((batch, 1), dtype=torch.int64, device=x.device)
        else:
            pos = cache.len_store.reshape(batch, 1).to(x.device)
        q = apply_rope(q, pos, layer.rope_base)
        k = apply_rope(k, pos, layer.rope_base)
        append(cache, k, v, counts)
        y = attend(cache, q)
        return layer.wo(y.permute(0, 2, 1, 3).reshape(batch, 1, hq * d))


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (given; every implementation shares this convention).

    x: [B, H, T, D], D even. positions: int64 [B, T], absolute positions.
    Rotate-half convention of Llama-family models (it matches Hugging Face transformers):
    inv_freq = base ** (-arange(0, D, 2) / D), angles = positions[..., None] * inv_freq,
    emb = cat(angles, angles), out = x * cos(emb) + rotate_half(x) * sin(emb) with
    rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]). Computed in float32, returned in x's dtype.
    """
    head_dim = x.shape[-1]
    even = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32)  # [D/2]
    inv_freq = base ** (-even / head_dim)  # [D/2]
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D], broadcast over heads
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)  # rotate_half(x)
    return (xf * emb.cos() + rotated * emb.sin()).to(x.dtype)
