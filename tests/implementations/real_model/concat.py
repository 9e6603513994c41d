"""A correct section-8 cache of the concat style (contract v1.3 section 8, no window): the
concat baseline (solutions/concat_kv_cache.py) with `positions`, `attend_chunk` and `truncate`
added. A test fixture of tests/test_real_model.py (kept apart from tests/implementations/*.py, which
must reach L6: this one fails prealloc): the real-model item must pass it.

Without a window `positions` equals `lengths`; `attend_chunk` masks each query of the chunk to
its own past; `truncate` lowers `lengths`, and the next append overwrites what was dropped.
"""
import math

import torch
from torch import Tensor


class KVCache:
    """One attention layer's cache for a batch of sequences.

    keys, values: [B, Hkv, T, D] views of the valid prefix, T = max(lengths); None when empty.
    lengths: int64 [B], valid positions per row; None when empty.
    capacity: time slots allocated in storage; 0 when empty; always >= max(lengths).
    `KVCache(capacity=N)` allocates N slots at the first append (more if that append needs more).
    """

    def __init__(self, capacity: int | None = None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.requested_capacity = capacity or 0
        self.k_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.v_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.lengths: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return 0 if self.k_storage is None else self.k_storage.shape[2]

    @property
    def keys(self) -> Tensor | None:  # [B, Hkv, T, D], a view: no copy
        return None if self.k_storage is None else self.k_storage[:, :, : int(self.lengths.max())]

    @property
    def values(self) -> Tensor | None:  # [B, Hkv, T, D]
        return None if self.v_storage is None else self.v_storage[:, :, : int(self.lengths.max())]


def _validate_append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts) -> Tensor:
    """Raise ValueError on anything incompatible, before any change; return counts, int64 [B]."""
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
        return torch.full((batch,), t, dtype=torch.int64, device=new_key.device)
    if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        got = counts.dtype if isinstance(counts, Tensor) else type(counts).__name__
        raise ValueError(f"counts dtype: expected an int64 tensor, got {got}")
    if counts.shape != (batch,):
        raise ValueError(f"counts shape: expected [{batch}], got {list(counts.shape)}")
    if counts.min() < 0 or counts.max() > t:
        raise ValueError(f"counts range: each must be in 0..{t}, got {counts.tolist()}")
    return counts.to(new_key.device)


def _reserve(cache: KVCache, needed: int, like: Tensor) -> None:
    """Make storage hold at least `needed` time slots, keeping what is stored."""
    if cache.k_storage is not None and needed <= cache.capacity:
        return
    if cache.k_storage is None and needed <= cache.requested_capacity:
        capacity = cache.requested_capacity
    else:
        # The toy strategy: grow by exactly what this append needs, so single-token appends
        # reallocate, and copy the whole cache, at every step: O(n^2) bytes for n tokens.
        capacity = needed
    batch, kv_heads, _, head_dim = like.shape
    # Zeros, not torch.empty: masked slots get weight exactly 0, and 0 * (uninitialised NaN) is NaN.
    k = like.new_zeros(batch, kv_heads, capacity - cache.capacity, head_dim)  # [B, Hkv, new, D]
    v = like.new_zeros(batch, kv_heads, capacity - cache.capacity, head_dim)
    if cache.k_storage is not None:  # torch.cat: a new tensor the size of the whole cache
        k = torch.cat((cache.k_storage, k), dim=2)  # [B, Hkv, capacity, D]
        v = torch.cat((cache.v_storage, v), dim=2)
    cache.k_storage, cache.v_storage = k, v


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append new_key, new_value ([B, Hkv, t, D]) along time.

    counts (int64 [B], each in 0..t, default all t): row b writes new_key[b, :, :counts[b]] at
    positions lengths[b] .. lengths[b] + counts[b] - 1. The first append fixes batch, kv_heads,
    head_dim, dtype and device. ValueError on anything incompatible, and the cache is unchanged.
    """
    counts = _validate_append(cache, new_key, new_value, counts)  # [B]
    batch, _, t, _ = new_key.shape
    lengths = cache.lengths if cache.lengths is not None else counts.new_zeros(batch)  # [B]
    new_lengths = lengths + counts  # [B]
    _reserve(cache, int(new_lengths.max()), new_key)

    # Scatter every real new position to its row's own offset in one indexed write.
    offsets = torch.arange(t, device=new_key.device)  # [t]
    real = offsets < counts[:, None]  # [B, t]: which new positions row b keeps
    rows = torch.arange(batch, device=new_key.device)[:, None].expand(batch, t)[real]  # [N]
    src = offsets.expand(batch, t)[real]  # [N]: time index in new_key
    dst = (lengths[:, None] + offsets)[real]  # [N]: time index in storage
    cache.k_storage[rows, :, dst] = new_key[rows, :, src]  # [N, Hkv, D]
    cache.v_storage[rows, :, dst] = new_value[rows, :, src]
    cache.lengths = new_lengths


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """Attention of the newest query ([B, Hq, 1, D]) over each row's cached positions.

    Row b attends over positions 0 .. lengths[b] - 1, scores scaled by 1/sqrt(D), softmax in
    float32. A row of length 0 returns zeros. Returns [B, Hq, 1, D] in the query's dtype. ValueError
    on an empty cache or an incompatible query. Modifies neither the cache nor the query.
    """
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

    keys, values = cache.keys, cache.values  # [B, Hkv, T, D], T = max(lengths)
    groups = q_heads // kv_heads
    # repeat_interleave COPIES K and V to Hq heads (head h gets KV head h // groups): simple, but
    # it spends at every step the memory GQA saved. kv_cache.py groups the query instead.
    keys = keys.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    values = values.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    q = query  # [B, Hq, 1, D]
    # float32 scores and softmax: in fp16, q·k itself overflows past 65504 (large logits become
    # inf), and bf16 keeps 8 bits of mantissa (scores near 20000 round to steps of 128). The
    # softmax is safe either way: torch.softmax subtracts each row's max before exp().
    # (This upcasts a copy of K; fused attention kernels upcast tile by tile instead.)
    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)  # [B, Hq, 1, T]
    # No causal mask: in a full forward it hides the positions after each query's own, and the
    # newest query is the last position, so every cached position is its past or itself.
    # Mask by lengths, not capacity: slots past a row's length are unused, padding from another
    # row's longer append, or stale data of a released sequence.
    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]  # [B, T]
    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # max-subtracted inside: stable for large logits
    # A row of length 0 has every score -inf, so softmax gives NaN there: return zeros instead.
    weights = weights.masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)
    out = weights.to(values.dtype) @ values  # [B, Hq, 1, D]
    return out.to(query.dtype)


def reset(cache: KVCache) -> None:
    """Forget everything; the next append may start a batch of any shape, dtype or device."""
    cache.k_storage = cache.v_storage = cache.lengths = None


def release(cache: KVCache, index: int) -> None:
    """Sequence `index` ended: its length becomes 0, other rows are untouched.

    Its slots keep stale data until overwritten; attend never reads them because it masks by length.
    """
    if cache.lengths is None:
        raise ValueError("release on an empty cache")
    if not 0 <= index < cache.lengths.shape[0]:
        raise IndexError(f"release: index {index} out of range for batch {cache.lengths.shape[0]}")
    cache.lengths = cache.lengths.clone()  # a fresh tensor: a caller's `lengths` never changes
    cache.lengths[index] = 0


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """Beam reordering: new row j is old row beam_idx[j] (int64 [B']; B' may differ from B)."""
    if cache.k_storage is None:
        raise ValueError("reorder on an empty cache")
    if beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    beam_idx = beam_idx.to(cache.k_storage.device)
    # The cost: a copy of the whole storage (capacity, not only lengths), on every layer at every
    # step of a beam search, at least what attention itself reads. Paged caches share blocks
    # between beams and copy one block on write instead (paged_kv_cache.py).
    cache.k_storage = cache.k_storage.index_select(0, beam_idx)  # [B', Hkv, capacity, D]
    cache.v_storage = cache.v_storage.index_select(0, beam_idx)
    cache.lengths = cache.lengths.index_select(0, beam_idx)  # [B']


def fork(cache: KVCache) -> KVCache:
    """An independent copy: same sequences at the same positions, no shared storage."""
    copy = KVCache(cache.requested_capacity)
    if cache.k_storage is not None:
        copy.k_storage = cache.k_storage.clone()
        copy.v_storage = cache.v_storage.clone()
        copy.lengths = cache.lengths.clone()
    return copy


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary embedding, rotate-half convention (Hugging Face Llama).

    x: [B, H, T, D], D even. positions: int64 [B, T] absolute positions. Computed in float32,
    returned in x's dtype.
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


@torch.no_grad()  # inference only: with autograd on, the cache would keep every step's graph alive
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """One attention layer's incremental step for the newest token x ([B, 1, d_model]).

    Projects only x, applies RoPE to q and k at each row's absolute position lengths[b] (0 for an
    empty cache), appends k (after RoPE) and v with counts (int64 [B] of 0/1, default all 1),
    attends, merges heads and applies wo. Returns [B, 1, d_model].
    """
    if x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {tuple(x.shape)}")
    batch = x.shape[0]
    if cache.lengths is not None and cache.lengths.shape[0] != batch:
        raise ValueError(f"batch: x has {batch}, cache has {cache.lengths.shape[0]}")
    heads, kv_heads, head_dim = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(batch, 1, heads, head_dim).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)  # [B, Hkv, 1, D]

    # The new token's absolute position is the number of tokens its row already holds.
    lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    positions = lengths.to(x.device)[:, None]  # [B, 1]
    q = apply_rope(q, positions, layer.rope_base)
    # Keys are cached after RoPE: a key's rotation depends only on its own position, which never
    # changes, so it is rotated once, here. A later query, rotated at its own position, then
    # makes q·k depend only on the distance between the two.
    k = apply_rope(k, positions, layer.rope_base)

    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * head_dim))  # [B, 1, d_model]


def _positions(cache: KVCache) -> Tensor | None:  # int64 [B]: without a window, the lengths
    return cache.lengths


KVCache.positions = property(_positions)


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    """The t queries [B, Hq, t, D] of the t positions each row appended last: query i of row b
    sits at position lengths[b] - t + i and attends positions 0 .. that one (a causal mask)."""
    if cache.k_storage is None:
        raise ValueError("attend_chunk on an empty cache: append first")
    if query.dim() != 4:
        raise ValueError(f"rank: query must be [B, Hq, t, D], got {tuple(query.shape)}")
    batch, q_heads, t, head_dim = query.shape
    stored = cache.k_storage
    for name, got, want in (("batch", batch, stored.shape[0]), ("head_dim", head_dim, stored.shape[3]),
                            ("dtype", query.dtype, stored.dtype), ("device", query.device, stored.device)):
        if got != want:
            raise ValueError(f"{name}: query has {got}, cache has {want}")
    if q_heads % stored.shape[1]:
        raise ValueError(f"heads: query heads {q_heads} are not a multiple of kv_heads {stored.shape[1]}")
    held = cache.lengths[cache.lengths > 0]
    if held.numel() and int(held.min()) < t:
        raise ValueError(f"time: a chunk of {t} queries, but a row holds only {int(held.min())} positions")
    groups = q_heads // stored.shape[1]
    keys = cache.keys.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    values = cache.values.repeat_interleave(groups, dim=1)  # [B, Hq, T, D]
    scores = (query.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)  # [B, Hq, t, T]
    at = cache.lengths[:, None] - t + torch.arange(t, device=query.device)  # [B, t]: each query's position
    later = torch.arange(keys.shape[2], device=query.device) > at[:, :, None]  # [B, t, T]
    scores = scores.masked_fill(later[:, None], float("-inf"))
    weights = torch.softmax(scores, dim=-1).masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)
    return (weights.to(values.dtype) @ values).to(query.dtype)


def truncate(cache: KVCache, lengths: Tensor) -> None:
    """Row b keeps positions 0 .. lengths[b] - 1; the next append writes at lengths[b]."""
    if cache.lengths is None:
        raise ValueError("truncate on an empty cache")
    if lengths.dtype != torch.int64 or lengths.shape != cache.lengths.shape:
        raise ValueError(f"lengths must be int64 {list(cache.lengths.shape)}")
    if bool((lengths < 0).any() | (lengths > cache.lengths).any()):
        raise ValueError("lengths must be within 0 .. each row's current length")
    cache.lengths = lengths.to(cache.lengths.device).clone()
