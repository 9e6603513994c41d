"""A KV cache with one big buffer, allocated once and grown (doubling) only when it must.

The first append allocates `capacity` slots when the cache was built with KVCache(capacity=N),
else DEFAULT_SLOTS (or more, if the first append alone needs more). keys / values / lengths /
capacity are plain attributes, refreshed after every operation: keys and values are views of the
buffer's valid prefix, lengths a fresh int64 tensor, capacity the buffer's time size.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

DEFAULT_SLOTS = 4096


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)):
            raise ValueError(f"capacity must be an int or None, got {capacity!r}")
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.requested = capacity
        self.kbuf: Tensor | None = None  # [B, Hkv, slots, D]
        self.vbuf: Tensor | None = None
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.lengths: Tensor | None = None
        self.capacity: int = 0

    # -- bookkeeping ---------------------------------------------------------------------------

    def _publish(self, lengths: Tensor | None) -> None:
        """Refresh the public attributes from the buffers and `lengths`."""
        if self.kbuf is None:
            self.keys = self.values = self.lengths = None
            self.capacity = 0
            return
        longest = int(lengths.max()) if lengths.numel() else 0
        self.lengths = lengths
        self.keys = self.kbuf[:, :, :longest]
        self.values = self.vbuf[:, :, :longest]
        self.capacity = self.kbuf.shape[2]

    def _ensure(self, slots_needed: int, like: Tensor) -> None:
        if self.kbuf is None:
            slots = self.requested if self.requested is not None else DEFAULT_SLOTS
            if slots < slots_needed:
                slots = max(2 * slots, slots_needed, 1)
            shape = (like.shape[0], like.shape[1], slots, like.shape[3])
            self.kbuf = torch.zeros(shape, dtype=like.dtype, device=like.device)
            self.vbuf = torch.zeros(shape, dtype=like.dtype, device=like.device)
            return
        old = self.kbuf.shape[2]
        if slots_needed <= old:
            return
        slots = max(2 * old, slots_needed)  # doubling: O(log n) reallocations for n appends
        B, H, _, D = self.kbuf.shape
        kbuf = self.kbuf.new_zeros(B, H, slots, D)
        vbuf = self.vbuf.new_zeros(B, H, slots, D)
        kbuf[:, :, :old] = self.kbuf
        vbuf[:, :, :old] = self.vbuf
        self.kbuf, self.vbuf = kbuf, vbuf


def _fail(what: str) -> None:
    raise ValueError(what)


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    k, v = new_key, new_value
    if not (isinstance(k, Tensor) and isinstance(v, Tensor)):
        _fail("key and value must be torch tensors")
    if k.ndim != 4:
        _fail(f"rank: new_key must have 4 dims [B, Hkv, t, D], got {k.ndim}")
    if v.ndim != 4:
        _fail(f"rank: new_value must have 4 dims [B, Hkv, t, D], got {v.ndim}")
    if k.shape != v.shape:
        _fail(f"key/value shape mismatch: {list(k.shape)} vs {list(v.shape)}")
    if k.dtype != v.dtype:
        _fail(f"key/value dtype mismatch: {k.dtype} vs {v.dtype}")
    if k.device != v.device:
        _fail(f"key/value device mismatch: {k.device} vs {v.device}")
    if not k.is_floating_point():
        _fail(f"dtype must be floating point, got {k.dtype}")
    B, H, t, D = k.shape
    if t == 0:
        _fail("time: append needs at least one position")
    if cache.kbuf is not None:
        cB, cH, _, cD = cache.kbuf.shape
        for name, mine, theirs in (("batch", cB, B), ("kv_heads", cH, H), ("head_dim", cD, D),
                                   ("dtype", cache.kbuf.dtype, k.dtype),
                                   ("device", cache.kbuf.device, k.device)):
            if mine != theirs:
                _fail(f"{name} differs: cache has {mine}, new key has {theirs}")
    if counts is None:
        n = [t] * B
    else:
        if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
            _fail(f"counts must be an int64 tensor, got {getattr(counts, 'dtype', type(counts))}")
        if counts.shape != (B,):
            _fail(f"counts shape must be [{B}], got {list(counts.shape)}")
        if counts.is_meta:
            _fail("counts device: meta tensors hold no values")
        n = counts.tolist()
        if any(c < 0 or c > t for c in n):
            _fail(f"counts range: each must be within 0..{t}, got {n}")

    # validated: mutate
    old = cache.lengths.tolist() if cache.lengths is not None else [0] * B
    new = [a + c for a, c in zip(old, n)]
    cache._ensure(max(new, default=0), k)
    if all(c == t for c in n) and len(set(old)) <= 1:
        # every row writes all t positions at the same offset: one slice assignment
        at = old[0] if old else 0
        cache.kbuf[:, :, at : at + t] = k
        cache.vbuf[:, :, at : at + t] = v
    else:
        # ragged: for each new offset j, the rows that keep position j write it at their own slot
        n_t = torch.tensor(n, dtype=torch.int64, device=k.device)
        old_t = torch.tensor(old, dtype=torch.int64, device=k.device)
        for j in range(max(n, default=0)):
            rows = torch.nonzero(n_t > j).flatten()
            slots = old_t[rows] + j
            cache.kbuf[rows, :, slots] = k[rows, :, j]
            cache.vbuf[rows, :, slots] = v[rows, :, j]
    cache._publish(torch.tensor(new, dtype=torch.int64, device=k.device))


def attend(cache: KVCache, query: Tensor) -> Tensor:
    if cache.kbuf is None:
        _fail("attend on an empty cache")
    if not isinstance(query, Tensor) or query.ndim != 4 or query.shape[2] != 1:
        _fail(f"rank: query must be [B, Hq, 1, D], got {getattr(query, 'shape', query)}")
    B, Hq, _, D = query.shape
    cB, Hkv, _, cD = cache.kbuf.shape
    if B != cB:
        _fail(f"batch differs: cache has {cB}, query has {B}")
    if D != cD:
        _fail(f"head_dim differs: cache has {cD}, query has {D}")
    if Hq == 0 or Hq % Hkv != 0:
        _fail(f"heads: query heads {Hq} not a multiple of kv_heads {Hkv}")
    if query.dtype != cache.kbuf.dtype:
        _fail(f"dtype differs: cache has {cache.kbuf.dtype}, query has {query.dtype}")
    if query.device != cache.kbuf.device:
        _fail(f"device differs: cache on {cache.kbuf.device}, query on {query.device}")

    T = cache.keys.shape[2]
    if T == 0:  # every row released or empty: nothing to attend to
        return torch.zeros_like(query)
    G = Hq // Hkv
    # query head h = kvh * G + g reads KV head kvh: group the query, broadcast K/V over g
    q = query.reshape(B, Hkv, G, D).float()
    keys = cache.keys.float()  # [B, Hkv, T, D]
    vals = cache.values.float()
    logits = torch.matmul(q, keys.transpose(2, 3)) * (1.0 / math.sqrt(D))  # [B, Hkv, G, T]
    live = torch.arange(T, device=query.device) < cache.lengths.view(B, 1)  # [B, T]
    live = live.view(B, 1, 1, T)
    logits = torch.where(live, logits, torch.full_like(logits, -math.inf))
    peak = logits.amax(dim=-1, keepdim=True)
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    w = torch.exp(logits - peak)  # masked slots: exp(-inf) = 0
    total = w.sum(dim=-1, keepdim=True)
    w = w / torch.where(total > 0, total, torch.ones_like(total))  # empty rows: all-zero weights
    vals = torch.where(live.view(B, 1, T, 1), vals, torch.zeros_like(vals))
    out = torch.matmul(w, vals)  # [B, Hkv, G, D]
    return out.reshape(B, Hq, 1, D).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.kbuf = cache.vbuf = None
    cache._publish(None)


def release(cache: KVCache, index: int) -> None:
    if cache.lengths is None:
        _fail("release on an empty cache")
    B = cache.lengths.shape[0]
    if isinstance(index, bool) or not isinstance(index, int):
        index = int(index)
    if index < 0 or index >= B:
        raise IndexError(f"release index {index} out of range for batch {B}")
    lengths = cache.lengths.clone()
    lengths[index] = 0
    cache._publish(lengths)


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    if cache.kbuf is None:
        _fail("reorder on an empty cache")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.ndim != 1:
        _fail("beam_idx must be a 1-d int64 tensor")
    B = cache.kbuf.shape[0]
    picks = beam_idx.tolist()
    if not picks or min(picks) < 0 or max(picks) >= B:
        _fail(f"beam_idx must be non-empty with values in 0..{B - 1}, got {picks}")
    idx = beam_idx.to(cache.kbuf.device)
    cache.kbuf = cache.kbuf[idx]  # [B', Hkv, slots, D], a gathered copy per new row
    cache.vbuf = cache.vbuf[idx]
    cache._publish(cache.lengths[idx])


def fork(cache: KVCache) -> KVCache:
    other = KVCache(cache.requested)
    if cache.kbuf is not None:
        other.kbuf = cache.kbuf.clone()
        other.vbuf = cache.vbuf.clone()
        other._publish(cache.lengths.clone())
    return other


def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[1] != 1:
        _fail(f"rank: x must be [B, 1, d_model], got {getattr(x, 'shape', x)}")
    B = x.shape[0]
    if cache.lengths is not None and cache.lengths.shape[0] != B:
        _fail(f"batch differs: cache has {cache.lengths.shape[0]}, x has {B}")
    nh, nkv, hd = layer.n_heads, layer.n_kv_heads, layer.head_dim
    with torch.no_grad():
        tok = x[:, 0]  # [B, d_model]: only the newest token is ever projected
        q = layer.wq(tok).view(B, nh, 1, hd)
        k = layer.wk(tok).view(B, nkv, 1, hd)
        v = layer.wv(tok).view(B, nkv, 1, hd)
        if cache.lengths is None:
            where = torch.zeros(B, 1, dtype=torch.int64, device=x.device)
        else:
            where = cache.lengths.to(x.device).unsqueeze(1)  # each row's absolute position
        q = apply_rope(q, where, layer.rope_base)
        k = apply_rope(k, where, layer.rope_base)
        append(cache, k, v, counts)
        ctx = attend(cache, q)  # [B, nh, 1, hd]
        return layer.wo(ctx.reshape(B, 1, nh * hd))


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
