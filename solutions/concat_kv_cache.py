"""Baseline solution: a KV cache that grows with `torch.cat` (step 1; `kv_cache.py` is step 2).

This is the question's reference sketch made correct for the whole L4/L5 contract: ragged rows
(`counts`), `release`, validation, float32 softmax, GQA. Each row writes at its own length and
attention masks every row by its own length, so rows of a batch may differ in length.

What is wrong with it for production:
- Allocation. Whenever an append would overflow, storage grows by exactly what that append needs,
  with `torch.cat`: a new buffer and a copy of the whole cache. Decoding one token per step then
  reallocates and copies on every step, O(n^2) bytes copied for n tokens, and the allocator
  fragments. Preallocating and growing geometrically (kv_cache.py) reallocates O(log n) times;
  serving systems go further and page the cache into fixed-size blocks.
- GQA. `attend` expands K and V to the query heads with `repeat_interleave`, a full copy of the
  cache per step, which gives back at compute time the memory GQA saved in storage.
- The row writes loop over the batch in Python, one small copy per row.

Layout: keys / values [B, Hkv, T, D]; newest query [B, Hq, 1, D], query head h reads KV head
h // (Hq // Hkv).
"""

import math

import torch
from torch import Tensor


class KVCache:
    """One layer's cache. keys/values: [B, Hkv, T, D] views, T = max(lengths), None when empty;
    lengths: int64 [B] or None; capacity: allocated time slots (0 when empty)."""

    def __init__(self, capacity: int | None = None):
        self.requested_capacity = capacity or 0
        self.k_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.v_storage: Tensor | None = None
        self.lengths: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return 0 if self.k_storage is None else self.k_storage.shape[2]

    @property
    def keys(self) -> Tensor | None:
        return None if self.k_storage is None else self.k_storage[:, :, : int(self.lengths.max())]

    @property
    def values(self) -> Tensor | None:
        return None if self.v_storage is None else self.v_storage[:, :, : int(self.lengths.max())]


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append [B, Hkv, t, D] along time; row b keeps its first counts[b] positions (default t).

    ValueError on anything incompatible, raised before the cache changes.
    """
    if new_key.dim() != 4:
        raise ValueError(f"rank: new_key must be [B, Hkv, t, D], got {new_key.dim()} dims")
    if new_key.shape != new_value.shape:
        raise ValueError(f"key and value shapes differ: {new_key.shape} vs {new_value.shape}")
    if new_key.dtype != new_value.dtype or new_key.device != new_value.device:
        raise ValueError("key and value dtype or device differ")
    batch, kv_heads, t, head_dim = new_key.shape
    if t < 1:
        raise ValueError("time: an append needs at least one position")
    if cache.k_storage is not None:
        stored = cache.k_storage
        for name, got, want in (
            ("batch", batch, stored.shape[0]),
            ("kv_heads", kv_heads, stored.shape[1]),
            ("head_dim", head_dim, stored.shape[3]),
            ("dtype", new_key.dtype, stored.dtype),
            ("device", new_key.device, stored.device),
        ):
            if got != want:
                raise ValueError(f"{name}: new key has {got}, cache has {want}")
    if counts is None:
        counts = torch.full((batch,), t, dtype=torch.int64)
    elif not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        raise ValueError("counts dtype: expected an int64 tensor")
    elif counts.shape != (batch,):
        raise ValueError(f"counts shape: expected [{batch}], got {list(counts.shape)}")
    elif counts.min() < 0 or counts.max() > t:
        raise ValueError(f"counts range: each must be in 0..{t}, got {counts.tolist()}")

    if cache.k_storage is None:
        empty = new_key.new_zeros(batch, kv_heads, cache.requested_capacity, head_dim)
        cache.k_storage, cache.v_storage = empty, empty.clone()
        cache.lengths = torch.zeros(batch, dtype=torch.int64, device=new_key.device)
    lengths = cache.lengths
    new_lengths = lengths + counts.to(lengths.device)  # [B]
    missing = int(new_lengths.max()) - cache.capacity
    if missing > 0:  # the toy strategy: grow by exactly what is needed, copying everything
        pad = new_key.new_zeros(batch, kv_heads, missing, head_dim)
        cache.k_storage = torch.cat((cache.k_storage, pad), dim=2)
        cache.v_storage = torch.cat((cache.v_storage, pad), dim=2)
    for b in range(batch):  # each row writes at its own length
        start, n = int(lengths[b]), int(counts[b])
        cache.k_storage[b, :, start : start + n] = new_key[b, :, :n]
        cache.v_storage[b, :, start : start + n] = new_value[b, :, :n]
    cache.lengths = new_lengths


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """[B, Hq, 1, D] newest query over each row's positions 0 .. lengths[b] - 1 -> [B, Hq, 1, D]."""
    if cache.k_storage is None:
        raise ValueError("attend on an empty cache: append first")
    if query.dim() != 4 or query.shape[2] != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {tuple(query.shape)}")
    batch, q_heads, _, head_dim = query.shape
    stored = cache.k_storage
    kv_heads = stored.shape[1]
    for name, got, want in (
        ("batch", batch, stored.shape[0]),
        ("head_dim", head_dim, stored.shape[3]),
        ("dtype", query.dtype, stored.dtype),
        ("device", query.device, stored.device),
    ):
        if got != want:
            raise ValueError(f"{name}: query has {got}, cache has {want}")
    if q_heads % kv_heads:
        raise ValueError(f"heads: query heads {q_heads} are not a multiple of kv_heads {kv_heads}")

    groups = q_heads // kv_heads
    # repeat_interleave COPIES K and V to Hq heads (head h gets KV head h // groups): simple, but
    # it spends the memory GQA saved. kv_cache.py groups the query instead.
    keys = cache.keys.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    values = cache.values.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    scores = (query.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)  # [B, Hq, 1, T]
    # No causal mask (the newest query has no future), but mask each row past its own length.
    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]  # [B, T]
    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # float32 softmax
    empty_rows = (cache.lengths == 0)[:, None, None, None]
    weights = weights.masked_fill(empty_rows, 0.0)  # a length-0 row is all -inf: NaN -> zeros
    return (weights.to(values.dtype) @ values).to(query.dtype)


def reset(cache: KVCache) -> None:
    """Forget everything; the next append may start any batch shape, dtype or device."""
    cache.k_storage = cache.v_storage = cache.lengths = None


def release(cache: KVCache, index: int) -> None:
    """Row `index` ended: its length becomes 0 (its stale slots are masked, then overwritten)."""
    if cache.lengths is None:
        raise ValueError("release on an empty cache")
    if not 0 <= index < cache.lengths.shape[0]:
        raise IndexError(f"release: index {index} out of range for batch {cache.lengths.shape[0]}")
    cache.lengths = cache.lengths.clone()
    cache.lengths[index] = 0


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """New row j is old row beam_idx[j] (int64 [B'])."""
    if cache.k_storage is None:
        raise ValueError("reorder on an empty cache")
    cache.k_storage = cache.k_storage.index_select(0, beam_idx)
    cache.v_storage = cache.v_storage.index_select(0, beam_idx)
    cache.lengths = cache.lengths.index_select(0, beam_idx)


def fork(cache: KVCache) -> KVCache:
    """An independent copy at the same positions."""
    copy = KVCache(cache.requested_capacity)
    if cache.k_storage is not None:
        copy.k_storage, copy.v_storage = cache.k_storage.clone(), cache.v_storage.clone()
        copy.lengths = cache.lengths.clone()
    return copy


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotate-half RoPE. x: [B, H, T, D]; positions: int64 [B, T]. float32 math, x's dtype out."""
    head_dim = x.shape[-1]
    even = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32)  # [D/2]
    inv_freq = base ** (-even / head_dim)  # [D/2]
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D]
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)  # rotate_half(x)
    return (xf * emb.cos() + rotated * emb.sin()).to(x.dtype)


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """Project only the newest token x [B, 1, d_model], RoPE q and k at position lengths[b],
    cache k (after RoPE) and v, attend, apply wo. Returns [B, 1, d_model]."""
    if x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {tuple(x.shape)}")
    batch = x.shape[0]
    if cache.lengths is not None and cache.lengths.shape[0] != batch:
        raise ValueError(f"batch: x has {batch}, cache has {cache.lengths.shape[0]}")
    heads, kv_heads, head_dim = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(batch, 1, heads, head_dim).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)  # [B, Hkv, 1, D]
    lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    positions = lengths.to(x.device)[:, None]  # [B, 1]: absolute position of the new token
    q = apply_rope(q, positions, layer.rope_base)
    k = apply_rope(k, positions, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * head_dim))
