"""Reference solution: a preallocated KV cache for incremental decoding (kata levels L4-L6).

Step 2 of solutions/README.md: the baseline, concat_kv_cache.py, with the same names, docstrings
and structure, and storage that is never copied (`kata solution --diff concat preallocated`).
Step 9, kv_cache.py, is this file with contract section 8 added (chunks, rollback, windows):
`kata solution --diff preallocated speculative`. kv_cache.py is the one `kata bench` measures.

Autoregressive decoding produces one token per step. Its attention needs the keys and values of
every earlier token, and those never change once computed, so we keep them in a cache and
project only the newest token each step. Queries are not cached: each is used once, at its own
step. Hidden states are not cached either: re-projecting them would redo the work we are saving.

Layout (always):
    keys / values   [B, Hkv, T, D]    batch, kv_heads, time, head_dim
    newest query    [B, Hq, 1, D]     Hq % Hkv == 0; query head h reads KV head h // (Hq // Hkv)

Design:
- Storage is preallocated, [B, Hkv, capacity, D] for K and for V, and rows are written in place.
  When a row would overflow, capacity doubles to the next power of two that fits, so n
  single-token appends cost O(log n) reallocations instead of the n of `torch.cat` every step.
- `lengths[b]` is how many positions of row b are valid. It is separate from `capacity`: rows of
  a batch grow at different rates (ragged prompts, finished beams, released slots), and attention
  masks by `lengths`, never by capacity, so unused or stale slots are never read.
- GQA/MQA share each KV head between G = Hq // Hkv query heads by reshaping the query into
  groups, never by copying K and V: the memory saving is the point of GQA.
gpt-fast's model.py, like transformers' StaticCache, does otherwise: a fixed size, K and V
repeated for every query head (`repeat_interleave`), and attention over the whole capacity
behind a mask. This cache grows, groups the query and reads only the valid prefix.

Why a decode step costs about what bare attention does (`kata bench`, float32, B=1, 8 heads,
head_dim 128, T=16384: 1.08x bare attention on contiguous K and V, 1.9x faster than
transformers' StaticCache; the table is in solutions/README.md). A step at a long length is
bound by reading K and V once, so the design avoids every extra pass over them and every
cache-sized allocation (the OS hands a large allocation its memory a page at a time, which alone
costs more than the attention):
- Attention over lengths, not capacity: `keys` and `values` are views of the first max(lengths)
  slots, so the matmuls read only those. A cache that attends over its whole capacity with a mask
  (as StaticCache does) reads up to twice as much.
- No float upcast when storage is already float32: `.float()` then returns the tensor itself.
  For bf16/fp16 it is a float32 copy of K at every step (about 23x the pure read at T=16384),
  the price of float32 scores in eager PyTorch; benchmarks/tiled_attention.py copies a tile at
  a time instead, benchmarks/fused_attention.py none.
- Grouped heads through a reshape of the query: K and V are never repeated per query head.
- Writes by one indexed assignment per append, not Python loops over rows or positions.
- No other per-step allocation of cache-sized tensors: storage grows geometrically, and a step
  allocates only the scores and weights, [B, Hq, T] floats, far smaller than the cache.
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


def _next_power_of_two(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


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
        # Geometric growth: a doubling copies as much as all earlier ones together, so the total
        # copying stays linear in the final length and n appends reallocate O(log n) times.
        capacity = _next_power_of_two(needed)
    batch, kv_heads, _, head_dim = like.shape
    # Zeros, not torch.empty: masked slots get weight exactly 0, and 0 * (uninitialised NaN) is NaN.
    k = like.new_zeros(batch, kv_heads, capacity, head_dim)  # [B, Hkv, capacity, D]
    v = like.new_zeros(batch, kv_heads, capacity, head_dim)
    if cache.k_storage is not None:
        k[:, :, : cache.capacity] = cache.k_storage
        v[:, :, : cache.capacity] = cache.v_storage
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
    # Heads h = kv * groups + g, so this reshape puts query head h beside KV head h // groups;
    # K and V broadcast over the group dimension and are never copied.
    q = query.reshape(batch, kv_heads, groups, head_dim)  # [B, Hkv, G, D]
    # float32 scores and softmax: in fp16, q·k itself overflows past 65504 (large logits become
    # inf), and bf16 keeps 8 bits of mantissa (scores near 20000 round to steps of 128). The
    # softmax is safe either way: torch.softmax subtracts each row's max before exp().
    # (This upcasts a copy of K; fused attention kernels upcast tile by tile instead.)
    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)  # [B, Hkv, G, T]
    # No causal mask: in a full forward it hides the positions after each query's own, and the
    # newest query is the last position, so every cached position is its past or itself.
    # Mask by lengths, not capacity: slots past a row's length are unused, padding from another
    # row's longer append, or stale data of a released sequence.
    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]  # [B, T]
    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # max-subtracted inside: stable for large logits
    # A row of length 0 has every score -inf, so softmax gives NaN there: return zeros instead.
    weights = weights.masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)
    out = weights.to(values.dtype) @ values  # [B, Hkv, G, D]
    return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)


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
