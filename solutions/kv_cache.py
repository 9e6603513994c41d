"""Reference solution: a preallocated KV cache for incremental decoding (kata levels L4-L6, L6+).

Step 9 of solutions/README.md: step 2, kv_cache_l6.py (the baseline, concat_kv_cache.py, with
the same names, docstrings and structure, and storage that is never copied), with contract
section 8 added (`kata solution --diff preallocated speculative`).

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

Past L6 (contract section 8): `attend_chunk` verifies a chunk of drafts in one call, `truncate`
rolls rejected drafts back, and `KVCache(window=W)` is a sliding-window cache.
- A chunk of t queries needs a mask, where one query does not: the chunk's later positions are
  already cached when its earlier queries attend, so query i hides every position after its own.
- Rolling back is setting lengths: the dropped slots keep their data until the next drafts
  overwrite them, and the lengths mask never reads them (capacity is not given back).
- A window is a ring buffer of W + t - 1 slots for the largest chunk t appended (the chunk's
  first query still needs its W - 1 predecessors): position p lives in slot p % slots and is
  overwritten once it has left every query's window, so memory and attention cost follow W, not
  the run's length. `keys`/`values` gather the held positions in time order; `positions` counts
  what each row has seen, `lengths` what it still holds. RoPE stays at absolute positions.
  A single query attends the ring as it lies (its softmax does not care about order), and a
  decode step past the first W positions overwrites one slot and masks nothing, so its cost is
  that of bare attention over W positions (`kata bench`'s window table).

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
    positions: int64 [B], the tokens each row has appended (since made, reset or released); None
    when empty. Without a window it is `lengths`.
    `KVCache(window=W)`: a sliding window of W positions in a ring buffer; capacity is ignored.
    """

    def __init__(self, capacity: int | None = None, window: int | None = None):
        if capacity is not None and capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {capacity}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.requested_capacity = capacity or 0
        self.window = window
        self.k_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.v_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.lengths: Tensor | None = None  # int64 [B]
        # A window's rows hold fewer positions than they have seen: int64 [B], kept beside lengths
        # (read only while lengths is not None, so reset needs not clear it).
        self.seen: Tensor | None = None

    @property
    def positions(self) -> Tensor | None:  # int64 [B]
        if self.lengths is None or self.window is None:
            return self.lengths
        return self.seen

    @property
    def capacity(self) -> int:
        return 0 if self.k_storage is None else self.k_storage.shape[2]

    @property
    def keys(self) -> Tensor | None:  # [B, Hkv, T, D], a view: no copy
        if self.window is not None and self.k_storage is not None:
            return _in_time_order(self, self.k_storage)  # a ring: a gather, W + t - 1 slots at most
        return None if self.k_storage is None else self.k_storage[:, :, : int(self.lengths.max())]

    @property
    def values(self) -> Tensor | None:  # [B, Hkv, T, D]
        if self.window is not None and self.v_storage is not None:
            return _in_time_order(self, self.v_storage)
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
    if cache.window is not None:
        _append_to_ring(cache, new_key, new_value, counts)
        return
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

    if cache.window is not None:
        return _attend_ring(cache, query)
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


def _attend_ring(cache: KVCache, query: Tensor) -> Tensor:
    """attend on a windowed cache, the query validated. One query's softmax does not care in what
    order it sees the positions: the ring is attended as it lies (W + t - 1 slots at most), with
    no gather into time order and nothing the size of the run."""
    batch, q_heads, _, head_dim = query.shape
    ring_k, ring_v = cache.k_storage, cache.v_storage  # [B, Hkv, S, D]
    grouped = query.reshape(batch, ring_k.shape[1], -1, head_dim)  # [B, Hkv, G, D]
    logits = grouped.float() @ ring_k.float().transpose(-1, -2) / math.sqrt(head_dim)  # [B, Hkv, G, S]
    # Decoding token by token past the first W, the ring is W slots all seen: nothing to mask.
    if ring_k.shape[2] == cache.window and min(cache.lengths.tolist()) == cache.window:
        probs = torch.softmax(logits, dim=-1)
    else:  # after a chunk, early on, after a release: mask what the newest query does not see
        hidden = _outside_window(cache)  # [B, S]
        probs = torch.softmax(logits.masked_fill(hidden[:, None, None, :], float("-inf")), dim=-1)
        probs = probs.masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)  # NaN rows
    mixed = probs.to(ring_v.dtype) @ ring_v  # [B, Hkv, G, D]
    return mixed.reshape(batch, q_heads, 1, head_dim).to(query.dtype)


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
    if cache.window is not None:
        cache.seen = cache.seen.clone()
        cache.seen[index] = 0


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
    if cache.window is not None:
        cache.seen = cache.seen.index_select(0, beam_idx)


def fork(cache: KVCache) -> KVCache:
    """An independent copy: same sequences at the same positions, no shared storage."""
    copy = KVCache(cache.requested_capacity, cache.window)
    if cache.k_storage is not None:
        copy.k_storage = cache.k_storage.clone()
        copy.v_storage = cache.v_storage.clone()
        copy.lengths = cache.lengths.clone()
        copy.seen = None if cache.seen is None else cache.seen.clone()
    return copy


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    """Attention of the t queries ([B, Hq, t, D]) of the t positions each row appended last.

    Query i of row b sits at absolute position p = positions[b] - t + i and attends its row's
    positions 0 .. p, or max(0, p - W + 1) .. p with a window; float32 scores and softmax as in
    `attend`, which it equals for t == 1. A row of length 0 returns zeros. Returns [B, Hq, t, D]
    in the query's dtype. ValueError as `attend`, and when a non-empty row holds fewer than t
    positions. Modifies neither the cache nor the query.
    """
    _check_chunk_query(cache, query)
    batch, q_heads, t, head_dim = query.shape
    kv_heads = cache.k_storage.shape[1]
    held, seen = cache.lengths, cache.positions  # [B], [B]
    if ((held > 0) & (held < t)).any():
        raise ValueError(f"time: a chunk of {t} queries needs its {t} positions cached, "
                         f"the rows hold {held.tolist()}")
    k, v = cache.keys, cache.values  # [B, Hkv, T, D], time order
    span = k.shape[2]
    slot = torch.arange(span, device=k.device)  # [T]
    at = (seen - held)[:, None] + slot  # [B, T]: the absolute position of each time index
    asks = (seen[:, None] - t) + torch.arange(t, device=k.device)  # [B, t]: each query's position
    # The causal mask a chunk needs: its later positions are already in the cache.
    visible = (slot < held[:, None])[:, None, :] & (at[:, None, :] <= asks[:, :, None])  # [B, t, T]
    if cache.window is not None:
        visible &= at[:, None, :] > asks[:, :, None] - cache.window
    grouped = query.reshape(batch, kv_heads, q_heads // kv_heads, t, head_dim)  # [B, Hkv, G, t, D]
    logits = grouped.float() @ k.float()[:, :, None].transpose(-1, -2) / math.sqrt(head_dim)
    logits = logits.masked_fill(~visible[:, None, None], float("-inf"))  # [B, Hkv, G, t, T]
    probs = torch.softmax(logits, dim=-1).masked_fill((held == 0)[:, None, None, None, None], 0.0)
    mixed = probs.to(v.dtype) @ v[:, :, None]  # [B, Hkv, G, t, D]
    return mixed.reshape(batch, q_heads, t, head_dim).to(query.dtype)


def _check_chunk_query(cache: KVCache, query: Tensor) -> None:
    """ValueError on a query attend_chunk cannot take, as `attend` checks its own."""
    if cache.k_storage is None:
        raise ValueError("attend_chunk on an empty cache: append first")
    if query.dim() != 4 or query.shape[2] < 1:
        raise ValueError(f"rank: query must be [B, Hq, t, D], got {tuple(query.shape)}")
    stored = cache.k_storage
    wanted = {"batch": (query.shape[0], stored.shape[0]), "head_dim": (query.shape[3], stored.shape[3]),
              "dtype": (query.dtype, stored.dtype), "device": (query.device, stored.device)}
    for name, (got, want) in wanted.items():
        if got != want:
            raise ValueError(f"{name}: query has {got}, cache has {want}")
    if query.shape[1] % stored.shape[1]:
        raise ValueError(f"heads: query heads {query.shape[1]} are not a multiple of kv_heads "
                         f"{stored.shape[1]}")


def truncate(cache: KVCache, lengths: Tensor) -> None:
    """Roll rejected drafts back: row b keeps positions 0 .. lengths[b] - 1 (int64 [B]).

    `positions` becomes `lengths`; the next append writes at lengths[b]. Capacity is kept for
    the next drafts; dropped slots keep stale data that the lengths mask never reads. With a
    window, `lengths` becomes what the row still holds of those positions (lengths[b] minus its
    oldest held position, at least 0), and ValueError when the next query's window would need a
    position already overwritten (rolling back to 0 always works). ValueError, the cache unchanged, on a length below 0 or above the row's
    positions, or on a tensor that is not int64 [B].
    """
    if cache.lengths is None:
        raise ValueError("truncate on an empty cache")
    batch = cache.lengths.shape[0]
    if not isinstance(lengths, Tensor) or lengths.dtype != torch.int64 or lengths.shape != (batch,):
        raise ValueError(f"lengths must be an int64 tensor [{batch}]")
    keep = lengths.to(cache.lengths.device)  # [B]
    seen = cache.positions
    if (keep < 0).any() or (keep > seen).any():
        raise ValueError(f"lengths: each must be in 0..positions, got {keep.tolist()} for "
                         f"positions {seen.tolist()}")
    if cache.window is None:
        cache.lengths = keep.clone()
        return
    oldest = seen - cache.lengths  # [B]: positions before it are overwritten
    # The next query, at position keep[b], needs the cached positions needs .. keep[b] - 1.
    needs = (keep - cache.window + 1).clamp_min(0)  # [B]
    if ((needs < oldest) & (needs < keep)).any():
        raise ValueError(f"lengths: the window after {keep.tolist()} needs positions from "
                         f"{needs.tolist()}, overwritten below {oldest.tolist()}")
    cache.lengths, cache.seen = (keep - oldest).clamp_min(0), keep.clone()


def _append_to_ring(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor) -> None:
    """append on a windowed cache: row b's position p goes to slot p % slots, overwriting the
    position `slots` before it, which no query's window reaches any more."""
    rows_in, t = new_key.shape[0], new_key.shape[2]
    fresh = cache.lengths is None
    held = counts.new_zeros(rows_in) if fresh else cache.lengths  # [B]
    seen = counts.new_zeros(rows_in) if fresh else cache.seen  # [B]
    # Scalars read with tolist (B ints): a step's bookkeeping is all it costs above bare attention.
    full = cache.capacity == cache.window and min(held.tolist()) == cache.window  # every row: W
    if t == 1 and full and min(counts.tolist()) == 1:  # counts <= t: every row takes its token
        # Decoding past the first W: each row's token overwrites its oldest position, nothing
        # else changes (the general path below costs as much again as the attention of W = 1024).
        at = seen.tolist()
        if len(set(at)) == 1:  # rows in step share the slot: a slice write, half an indexed one
            slot = at[0] % cache.window
            cache.k_storage[:, :, slot : slot + 1] = new_key  # [B, Hkv, 1, D]
            cache.v_storage[:, :, slot : slot + 1] = new_value
        else:
            rows = torch.arange(rows_in, device=new_key.device)  # [B]
            slots = seen % cache.window  # [B]
            cache.k_storage[rows, :, slots] = new_key[:, :, 0]  # [B, Hkv, D]
            cache.v_storage[rows, :, slots] = new_value[:, :, 0]
        cache.seen = seen + 1
        return
    # Slots for what the rows will hold: W + c - 1 at most for a chunk of c, fewer early on.
    bound = cache.window + max(int(counts.max()), 1) - 1
    _make_ring(cache, min(bound, int((seen + counts).max())), bound, new_key)
    ahead = torch.arange(t, device=new_key.device)  # [t]
    real = ahead < counts[:, None]  # [B, t]
    row = torch.arange(rows_in, device=new_key.device)[:, None].expand(rows_in, t)[real]  # [N]
    src = ahead.expand(rows_in, t)[real]  # [N]
    slot = ((seen[:, None] + ahead) % cache.capacity)[real]  # [N]
    cache.k_storage[row, :, slot] = new_key[row, :, src]  # [N, Hkv, D]
    cache.v_storage[row, :, slot] = new_value[row, :, src]
    # A chunk of c keeps its first query's W - 1 predecessors: W + c - 1 at most, c > 0.
    grown = torch.minimum(held + counts, cache.window + counts - 1)
    cache.lengths = torch.where(counts > 0, grown, held)
    cache.seen = seen + counts


def _make_ring(cache: KVCache, needed: int, bound: int, like: Tensor) -> None:
    """Give the ring at least `needed` slots, growing geometrically up to `bound` (W + t - 1),
    and move each held position p to slot p % slots."""
    if cache.k_storage is not None and cache.capacity >= needed:
        return
    slots = min(bound, _next_power_of_two(needed))
    batch, kv_heads, _, head_dim = like.shape
    ring_k = like.new_zeros(batch, kv_heads, slots, head_dim)  # [B, Hkv, slots, D]
    ring_v = like.new_zeros(batch, kv_heads, slots, head_dim)
    if cache.k_storage is not None and cache.lengths is not None:
        ordered_k, ordered_v = cache.keys, cache.values  # [B, Hkv, T, D], T <= old slots < slots
        span = torch.arange(ordered_k.shape[2], device=ring_k.device)  # [T]
        at = (cache.seen - cache.lengths)[:, None] + span  # [B, T]: absolute positions
        index = (at % slots)[:, None, :, None].expand_as(ordered_k)  # distinct in a row: T <= slots
        ring_k.scatter_(2, index, ordered_k)
        ring_v.scatter_(2, index, ordered_v)
    cache.k_storage, cache.v_storage = ring_k, ring_v


def _outside_window(cache: KVCache) -> Tensor:
    """The ring's slots the newest query of each row does not see: [B, S] bool. Slot s holds the
    latest position p < positions[b] with p = s mod S, (positions[b] - 1 - s) mod S back; the
    query sees those of the lengths[b] held that are in its window."""
    slots = cache.k_storage.shape[2]
    age = (cache.seen[:, None] - 1 - torch.arange(slots, device=cache.seen.device)) % slots  # [B, S]
    seen_from = cache.seen[:, None] - cache.window  # [B, 1]: positions before it are out
    return (age >= cache.lengths[:, None]) | (cache.seen[:, None] - 1 - age < seen_from)


def _in_time_order(cache: KVCache, storage: Tensor) -> Tensor:
    """A ring's held positions in time order: [B, Hkv, T, D], T = max(lengths); past a row's
    length, slots it does not hold (masked by lengths, as a row's padding is)."""
    span = int(cache.lengths.max())
    oldest = cache.seen - cache.lengths  # [B]
    slot = (oldest[:, None] + torch.arange(span, device=storage.device)) % storage.shape[2]  # [B, T]
    index = slot[:, None, :, None].expand(storage.shape[0], storage.shape[1], span, storage.shape[3])
    return storage.gather(2, index)


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

    Projects only x, applies RoPE to q and k at each row's absolute position positions[b] (0 for
    an empty cache; lengths[b] without a window), appends k (after RoPE) and v with counts (int64 [B] of 0/1, default all 1),
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
    if cache.window is not None and cache.lengths is not None:
        lengths = cache.positions  # a window holds fewer positions than its rows have seen
    positions = lengths.to(x.device)[:, None]  # [B, 1]
    q = apply_rope(q, positions, layer.rope_base)
    # Keys are cached after RoPE: a key's rotation depends only on its own position, which never
    # changes, so it is rotated once, here. A later query, rotated at its own position, then
    # makes q·k depend only on the distance between the two.
    k = apply_rope(k, positions, layer.rope_base)

    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(batch, 1, heads * head_dim))  # [B, 1, d_model]
