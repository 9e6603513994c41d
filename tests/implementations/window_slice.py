"""A KV cache whose rows stay left-aligned in one preallocated buffer (contract sections 1 and 8).

Row b always holds its positions in slots 0 .. lengths[b] - 1, oldest first, so `keys` and
`values` are a plain slice of the buffer and slot j holds the absolute position
positions[b] - lengths[b] + j. Without a window the buffer doubles when a row outgrows it.
With `window=W` a row appending c positions first slides its newest min(held, W - 1) positions
down to slot 0 (all the first new query still sees) and writes the c new ones after them: the
buffer never needs more than W - 1 + c slots, and no slot index is ever taken modulo anything.
"""

import math

import torch
from torch import Tensor


class KVCache:
    """One attention layer's cache: a [B, Hkv, S, D] buffer per K and V, rows left-aligned.

    lengths: int64 [B], positions held; positions: int64 [B], tokens appended (its next absolute
    position). Both live on the CPU; None until the first append fixes the batch.
    """

    def __init__(self, capacity: int | None = None, window: int | None = None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.first_size = capacity  # slots of the first allocation; ignored with a window
        self.window = window
        self._empty()

    def _empty(self) -> None:
        self._kbuf: Tensor | None = None  # [B, Hkv, S, D]
        self._vbuf: Tensor | None = None  # [B, Hkv, S, D]
        self.lengths: Tensor | None = None
        self.positions: Tensor | None = None
        self._widest = 0  # the most positions one append gave one row: the window's slot bound

    @property
    def capacity(self) -> int:
        return 0 if self._kbuf is None else self._kbuf.shape[2]

    @property
    def keys(self) -> Tensor | None:
        return None if self._kbuf is None else self._kbuf[:, :, : _span(self)]

    @property
    def values(self) -> Tensor | None:
        return None if self._vbuf is None else self._vbuf[:, :, : _span(self)]


def _span(cache: KVCache) -> int:
    """The time slots `keys` exposes: max(lengths)."""
    return int(cache.lengths.max()) if cache.lengths.numel() else 0


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    """Write counts[b] new positions after row b's held ones (after sliding, with a window)."""
    counts = _counts_for(cache, new_key, new_value, counts)  # int64 [B] on the CPU
    if cache.lengths is None:
        cache.lengths = torch.zeros_like(counts)
        cache.positions = torch.zeros_like(counts)
    held = cache.lengths
    if cache.window is None:
        kept = held
    else:  # a row that takes nothing keeps all it holds; one that grows keeps W - 1 of them
        kept = torch.where(counts > 0, held.clamp(max=cache.window - 1), held)
    cache._widest = max(cache._widest, int(counts.max()))
    _make_room(cache, int((kept + counts).max()), new_key)
    rows = zip(kept.tolist(), (held - kept).tolist(), counts.tolist())
    for b, (keep, drop, count) in enumerate(rows):
        for buf, new in ((cache._kbuf, new_key), (cache._vbuf, new_value)):
            if drop:  # slide the row's newest `keep` positions down to slot 0
                buf[b, :, :keep] = buf[b, :, drop : drop + keep].clone()
            if count:
                buf[b, :, keep : keep + count] = new[b, :, :count]
    cache.lengths = kept + counts
    cache.positions = cache.positions + counts


def _counts_for(cache: KVCache, key: Tensor, value: Tensor, counts: Tensor | None) -> Tensor:
    """Every check an append needs, made before anything is written; the counts to write."""
    if not isinstance(key, Tensor) or not isinstance(value, Tensor):
        raise ValueError("key and value must be tensors")
    if key.dim() != 4:
        raise ValueError(f"rank: key must be [B, Hkv, t, D], got rank {key.dim()}")
    if value.shape != key.shape:
        raise ValueError(f"shape: value {list(value.shape)} differs from key {list(key.shape)}")
    if value.dtype != key.dtype or not key.is_floating_point():
        raise ValueError(f"dtype: key {key.dtype} and value {value.dtype} must be one float type")
    if value.device != key.device:
        raise ValueError(f"device: key on {key.device}, value on {value.device}")
    batch, heads, t, dim = key.shape
    if t < 1:
        raise ValueError("time: an append needs t >= 1 positions")
    if cache._kbuf is not None:
        want_batch, want_heads, _, want_dim = cache._kbuf.shape
        for name, got, want in (
            ("batch", batch, want_batch),
            ("kv_heads", heads, want_heads),
            ("head_dim", dim, want_dim),
        ):
            if got != want:
                raise ValueError(f"{name}: {got}, the cache has {want}")
        if key.dtype != cache._kbuf.dtype:
            raise ValueError(f"dtype: {key.dtype}, the cache holds {cache._kbuf.dtype}")
        if key.device != cache._kbuf.device:
            raise ValueError(f"device: {key.device}, the cache is on {cache._kbuf.device}")
    if counts is None:
        return torch.full((batch,), t, dtype=torch.int64)
    if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        raise ValueError("counts: must be an int64 tensor")
    if counts.shape != (batch,):
        raise ValueError(f"counts: shape {list(counts.shape)}, expected [{batch}]")
    counts = counts.cpu()
    if bool(((counts < 0) | (counts > t)).any()):
        raise ValueError(f"counts: each must be in 0..{t}, got {counts.tolist()}")
    return counts


def _make_room(cache: KVCache, slots: int, like: Tensor) -> None:
    """Buffers of at least `slots` time slots, shaped, typed and placed as `like` [B, Hkv, t, D].

    Growth doubles; with a window it stops at W - 1 + the widest append, which `slots` never
    passes (a row keeps at most W - 1 old positions before its new ones).
    """
    have = cache.capacity
    if cache._kbuf is not None and slots <= have:
        return
    size = max(slots, 2 * have, 1)
    if cache.window is not None:
        size = min(size, cache.window - 1 + max(cache._widest, 1))
    elif have == 0 and cache.first_size:
        size = max(size, cache.first_size)
    batch, heads, _, dim = like.shape
    grown = []
    for old in (cache._kbuf, cache._vbuf):
        buf = like.new_zeros(batch, heads, size, dim)  # [B, Hkv, S, D]
        if old is not None:
            buf[:, :, :have] = old
        grown.append(buf)
    cache._kbuf, cache._vbuf = grown


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """The newest query [B, Hq, 1, D] over each row's window; [B, Hq, 1, D] in its dtype."""
    _check_query(cache, query)
    if query.shape[2] != 1:
        raise ValueError(f"time: attend takes one query per row, got {query.shape[2]}")
    return _masked_attention(cache, query)


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    """The t newest queries [B, Hq, t, D], query i of row b at positions[b] - t + i."""
    _check_query(cache, query)
    t = query.shape[2]
    if t < 1:
        raise ValueError("time: a chunk needs t >= 1 queries")
    short = (cache.lengths > 0) & (cache.lengths < t)
    if bool(short.any()):
        b = int(short.nonzero()[0])
        raise ValueError(f"time: a chunk of {t}, but row {b} holds {int(cache.lengths[b])}")
    return _masked_attention(cache, query)


def _check_query(cache: KVCache, query: Tensor) -> None:
    if cache._kbuf is None:
        raise ValueError("the cache is empty: append before attending")
    if not isinstance(query, Tensor) or query.dim() != 4:
        raise ValueError("rank: the query must be [B, Hq, t, D]")
    batch, heads, _, dim = cache._kbuf.shape
    if query.shape[0] != batch:
        raise ValueError(f"batch: query has {query.shape[0]}, the cache {batch}")
    if query.shape[3] != dim:
        raise ValueError(f"head_dim: query has {query.shape[3]}, the cache {dim}")
    if query.shape[1] < 1 or query.shape[1] % heads:
        raise ValueError(f"heads: {query.shape[1]} query heads on {heads} kv heads")
    if query.dtype != cache._kbuf.dtype:
        raise ValueError(f"dtype: query {query.dtype}, the cache {cache._kbuf.dtype}")
    if query.device != cache._kbuf.device:
        raise ValueError(f"device: query on {query.device}, the cache on {cache._kbuf.device}")


def _masked_attention(cache: KVCache, query: Tensor) -> Tensor:
    """Each query over the slots its mask allows; float32 (or wider) scores and softmax."""
    batch, hq, t, dim = query.shape
    hkv = cache._kbuf.shape[1]
    span = _span(cache)
    if span == 0:
        return torch.zeros_like(query)
    work = torch.promote_types(query.dtype, torch.float32)
    q = query.to(work).reshape(batch, hkv, hq // hkv, t, dim)  # [B, Hkv, G, t, D]
    k = cache._kbuf[:, :, None, :span].to(work)  # [B, Hkv, 1, T, D]
    v = cache._vbuf[:, :, None, :span].to(work)  # [B, Hkv, 1, T, D]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(dim)  # [B, Hkv, G, t, T]
    allowed = _mask(cache, t, span).to(query.device)  # [B, 1, 1, t, T]
    scores = scores.masked_fill(~allowed, -math.inf)
    peak = scores.amax(dim=-1, keepdim=True)  # [B, Hkv, G, t, 1]
    peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))  # rows seeing nothing
    weights = torch.exp(scores - peak)  # masked slots: exp(-inf) = 0
    total = weights.sum(dim=-1, keepdim=True)
    weights = weights / torch.where(total > 0, total, torch.ones_like(total))
    out = weights @ v  # [B, Hkv, G, t, D]
    return out.reshape(batch, hq, t, dim).to(query.dtype)


def _mask(cache: KVCache, t: int, span: int) -> Tensor:
    """bool [B, 1, 1, t, T]: slot j of row b is held, not after query i, and inside its window."""
    held, ahead = cache.lengths, cache.positions
    slot = torch.arange(span)  # [T]
    where = (ahead - held)[:, None] + slot  # [B, T] absolute position in each slot
    asking = ahead[:, None] - t + torch.arange(t)  # [B, t] absolute position of each query
    ok = (slot < held[:, None])[:, None, :] & (where[:, None, :] <= asking[:, :, None])
    if cache.window is not None:
        ok &= where[:, None, :] > asking[:, :, None] - cache.window
    return ok[:, None, None]


def reset(cache: KVCache) -> None:
    """Forget everything; the next append may fix a new batch, layout, dtype or device."""
    cache._empty()


def release(cache: KVCache, index: int) -> None:
    """Row `index` ends: it holds nothing and its next token is position 0 again."""
    if cache.lengths is None:
        raise ValueError("the cache is empty: no row to release")
    if not 0 <= index < cache.lengths.shape[0]:
        raise ValueError(f"index {index} is not a row of a batch of {cache.lengths.shape[0]}")
    lengths, positions = cache.lengths.clone(), cache.positions.clone()
    lengths[index] = positions[index] = 0
    cache.lengths, cache.positions = lengths, positions


def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """Project the newest token x [B, 1, d_model], rotate q and k at positions, cache k and v,
    attend; returns [B, 1, d_model]."""
    if x.dim() != 3 or x.shape[1] != 1:
        raise ValueError("x must be [B, 1, d_model]")
    batch = x.shape[0]
    if cache.positions is not None and cache.positions.shape[0] != batch:
        raise ValueError(f"batch: x has {batch} rows, the cache {cache.positions.shape[0]}")
    at = torch.zeros(batch, dtype=torch.int64) if cache.positions is None else cache.positions
    at = at[:, None]  # [B, 1]
    heads, kv_heads, dim = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(batch, 1, heads, dim).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(batch, 1, kv_heads, dim).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(batch, 1, kv_heads, dim).transpose(1, 2)  # [B, Hkv, 1, D]
    q, k = apply_rope(q, at, layer.rope_base), apply_rope(k, at, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * dim))


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """New row j is old row beam_idx[j] (int64 [B']): buffers, lengths and positions."""
    if cache.lengths is None:
        return  # nothing held yet: every order is the same
    rows = cache.lengths.shape[0]
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be an int64 tensor [B']")
    pick = beam_idx.cpu()
    if bool(((pick < 0) | (pick >= rows)).any()):
        raise ValueError(f"beam_idx: each must be a row in 0..{rows - 1}")
    on_device = pick.to(cache._kbuf.device)
    cache._kbuf = cache._kbuf.index_select(0, on_device)
    cache._vbuf = cache._vbuf.index_select(0, on_device)
    cache.lengths, cache.positions = cache.lengths[pick], cache.positions[pick]


def fork(cache: KVCache) -> KVCache:
    """A copy sharing no storage: the same rows, lengths, positions and window."""
    twin = KVCache(cache.first_size, cache.window)
    if cache.lengths is not None:
        twin._kbuf, twin._vbuf = cache._kbuf.clone(), cache._vbuf.clone()
        twin.lengths, twin.positions = cache.lengths.clone(), cache.positions.clone()
        twin._widest = cache._widest
    return twin


def truncate(cache: KVCache, lengths: Tensor) -> None:
    """Row b goes back to position lengths[b] (rejected drafts dropped).

    positions become lengths; a row holds what it still has of 0 .. lengths[b] - 1. ValueError,
    nothing changed, for a length outside 0..positions[b], or, with a window, when the next
    query (at lengths[b]) would need a position the row no longer holds.
    """
    if cache.lengths is None:
        raise ValueError("the cache is empty: nothing to truncate")
    rows = cache.lengths.shape[0]
    if not isinstance(lengths, Tensor) or lengths.dtype != torch.int64 or lengths.shape != (rows,):
        raise ValueError(f"lengths must be an int64 tensor [{rows}]")
    target = lengths.cpu()
    if bool(((target < 0) | (target > cache.positions)).any()):
        raise ValueError(
            f"lengths {target.tolist()}: each must be in 0..positions {cache.positions.tolist()}"
        )
    oldest = cache.positions - cache.lengths  # [B] absolute position in slot 0
    if cache.window is not None:
        first_seen = (target - cache.window + 1).clamp(min=0)  # the next query's window starts here
        gone = (first_seen < oldest) & (first_seen < target)
        if bool(gone.any()):
            b = int(gone.nonzero()[0])
            raise ValueError(
                f"row {b}: back to {int(target[b])} needs position {int(first_seen[b])}, "
                f"already overwritten (the row holds from {int(oldest[b])})"
            )
    cache.lengths = (target - oldest).clamp(min=0)
    cache.positions = target.clone()


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
