"""WRONG on purpose: fixed segments of 256 positions whose reorder moves only the newest one.

tests/implementations/segmented.py with the mistake transformers' QuantizedCache shipped: its
quantized part (every position before the last `residual_length`) was never reordered in beam
search, only the residual. Here `reorder` index-selects the newest segment and the lengths, and
leaves every older segment as it was: right while the whole cache fits in one segment (every
cache of at most 256 positions), wrong for every row whose old positions came from another row.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

SEGMENT = 256


class KVCache:
    """keys, values: [B, Hkv, max(lengths), D], joined on reading; lengths int64 [B]."""

    def __init__(self, capacity: int | None = None):
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                     or capacity < 0):
            raise ValueError(f"capacity must be None or an int >= 0, got {capacity!r}")
        self.requested = capacity or 0
        self.k_segments: list[Tensor] = []  # each [B, Hkv, SEGMENT, D]
        self.v_segments: list[Tensor] = []
        self.lengths: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return len(self.k_segments) * SEGMENT

    def _joined(self, segments: list[Tensor]) -> Tensor | None:
        if self.lengths is None:
            return None
        return torch.cat(segments, dim=2)[:, :, : int(self.lengths.max())]  # [B, Hkv, T, D]

    @property
    def keys(self) -> Tensor | None:
        return self._joined(self.k_segments)

    @property
    def values(self) -> Tensor | None:
        return self._joined(self.v_segments)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _counts(cache: KVCache, new_key: Tensor, new_value: Tensor, counts) -> Tensor:
    """ValueError on anything incompatible, before any change; the counts as int64 [B]."""
    _check(new_key.dim() == 4, f"rank: new_key must be [B, Hkv, t, D], got {new_key.dim()} dims")
    _check(new_key.shape == new_value.shape,
           f"key and value shapes differ: {list(new_key.shape)} vs {list(new_value.shape)}")
    _check(new_key.dtype == new_value.dtype and new_key.device == new_value.device,
           "key and value dtype or device differ")
    batch, kv_heads, t, head_dim = new_key.shape
    _check(t >= 1, "time: an append needs at least one position")
    if cache.k_segments:
        stored = cache.k_segments[-1]
        for name, got, want in (("batch", batch, stored.shape[0]),
                                ("kv_heads", kv_heads, stored.shape[1]),
                                ("head_dim", head_dim, stored.shape[3]),
                                ("dtype", new_key.dtype, stored.dtype),
                                ("device", new_key.device, stored.device)):
            _check(got == want, f"{name}: new key has {got}, cache has {want}")
    if counts is None:
        return torch.full((batch,), t, dtype=torch.int64)
    _check(isinstance(counts, Tensor) and counts.dtype == torch.int64,
           "counts dtype: expected an int64 tensor")
    _check(tuple(counts.shape) == (batch,), f"counts shape: expected [{batch}]")
    counts = counts.cpu()
    _check(bool(((counts >= 0) & (counts <= t)).all()), f"counts range: each must be in 0..{t}")
    return counts


def _grow(cache: KVCache, needed: int, like: Tensor) -> None:
    """Add zero-filled segments until `needed` positions fit (the requested capacity at first)."""
    needed = max(needed, cache.requested if not cache.k_segments else 0)
    batch, kv_heads, _, head_dim = like.shape
    while cache.capacity < needed:
        for segments in (cache.k_segments, cache.v_segments):
            segments.append(like.new_zeros(batch, kv_heads, SEGMENT, head_dim))


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Row b writes new_key[b, :, :counts[b]] at positions lengths[b] onwards, segment by
    segment."""
    counts = _counts(cache, new_key, new_value, counts)  # [B]
    batch, _, t, _ = new_key.shape
    lengths = (cache.lengths.cpu() if cache.lengths is not None
               else torch.zeros(batch, dtype=torch.int64))  # [B]
    _grow(cache, int((lengths + counts).max()), new_key)
    offsets = torch.arange(t)  # [t]
    real = offsets < counts[:, None]  # [B, t]
    rows = torch.arange(batch)[:, None].expand(batch, t)[real]  # [N]
    src = offsets.expand(batch, t)[real]  # [N]
    positions = (lengths[:, None] + offsets)[real]  # [N]
    for segment in positions.div(SEGMENT, rounding_mode="floor").unique().tolist():
        here = positions // SEGMENT == segment
        r, s, slot = rows[here], src[here], positions[here] % SEGMENT
        cache.k_segments[segment][r, :, slot] = new_key[r, :, s]  # [n, Hkv, D]
        cache.v_segments[segment][r, :, slot] = new_value[r, :, s]
    cache.lengths = (lengths + counts).to(new_key.device)


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """The newest query [B, Hq, 1, D] over each row's lengths[b] positions: [B, Hq, 1, D]."""
    _check(cache.lengths is not None, "attend on an empty cache: append first")
    _check(query.dim() == 4 and query.shape[2] == 1,
           f"rank: query must be [B, Hq, 1, D], got {list(query.shape)}")
    batch, q_heads, _, head_dim = query.shape
    stored = cache.k_segments[-1]
    kv_heads = stored.shape[1]
    for name, got, want in (("batch", batch, stored.shape[0]),
                            ("head_dim", head_dim, stored.shape[3]),
                            ("dtype", query.dtype, stored.dtype),
                            ("device", query.device, stored.device)):
        _check(got == want, f"{name}: query has {got}, cache has {want}")
    _check(q_heads % kv_heads == 0, f"heads: {q_heads} query heads, {kv_heads} kv_heads")
    groups = q_heads // kv_heads
    used = -(-int(cache.lengths.max()) // SEGMENT)  # segments holding a valid position
    q = query.reshape(batch, kv_heads, groups, head_dim).float()  # [B, Hkv, G, D]
    scores = torch.cat([q @ k.float().transpose(-1, -2) for k in cache.k_segments[:used]],
                       dim=-1) / math.sqrt(head_dim)  # [B, Hkv, G, used * SEGMENT]
    past_end = torch.arange(scores.shape[-1], device=query.device) >= cache.lengths[:, None]
    weights = torch.softmax(scores.masked_fill(past_end[:, None, None], float("-inf")), dim=-1)
    weights = weights.nan_to_num(0.0)  # a row of length 0: every score -inf, zeros out
    out = sum(w @ v.float() for w, v in zip(weights.split(SEGMENT, dim=-1),
                                             cache.v_segments[:used]))  # [B, Hkv, G, D]
    return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.k_segments, cache.v_segments, cache.lengths = [], [], None


def release(cache: KVCache, index: int) -> None:
    """Row `index` ends: length 0; its stale slots are masked, then overwritten."""
    _check(cache.lengths is not None, "release on an empty cache")
    if not 0 <= index < cache.lengths.shape[0]:
        raise IndexError(f"release: no row {index} in a batch of {cache.lengths.shape[0]}")
    cache.lengths = cache.lengths.clone()
    cache.lengths[index] = 0


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """New row j is old row beam_idx[j], in the newest segment (the residual) only."""
    _check(cache.lengths is not None, "reorder on an empty cache")
    _check(beam_idx.dtype == torch.int64 and beam_idx.dim() == 1,
           "beam_idx must be a 1-d int64 tensor")
    cache.k_segments[-1] = cache.k_segments[-1].index_select(0, beam_idx)
    cache.v_segments[-1] = cache.v_segments[-1].index_select(0, beam_idx)
    cache.lengths = cache.lengths.index_select(0, beam_idx)


def fork(cache: KVCache) -> KVCache:
    """A copy of every segment and of the lengths."""
    copy = KVCache(cache.requested)
    copy.k_segments = [s.clone() for s in cache.k_segments]
    copy.v_segments = [s.clone() for s in cache.v_segments]
    copy.lengths = None if cache.lengths is None else cache.lengths.clone()
    return copy


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """Project x [B, 1, d_model], rotate q and k at each row's length, append, attend, wo."""
    _check(x.dim() == 3 and x.shape[1] == 1, f"rank: x must be [B, 1, d_model], got {list(x.shape)}")
    batch = x.shape[0]
    heads, kv_heads, head_dim = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(batch, 1, heads, head_dim).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)
    lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    positions = lengths.to(x.device)[:, None]  # [B, 1]
    q = apply_rope(q, positions, layer.rope_base)
    k = apply_rope(k, positions, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * head_dim))


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
