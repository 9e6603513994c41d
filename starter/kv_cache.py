"""Your KV cache: incremental decoding for one attention layer.

Autoregressive decoding makes one token per step. Instead of re-running attention over the whole
prefix, keep the projected keys and values of earlier tokens in a cache, project only the newest
token, append its key and value, and attend with its query over the cache. The invariant to
keep: the newest token's output equals the output of a full causal forward over the same prefix,
at every prefix, up to floating-point tolerance.

Tensor layout, always:
    keys / values   [batch, kv_heads, time, head_dim]          ("[B, Hkv, T, D]")
    newest query    [batch, query_heads, 1, head_dim]          ("[B, Hq, 1, D]")
query_heads % kv_heads == 0: equal heads is MHA, kv_heads == 1 is MQA, anything else GQA. Query
head h reads KV head h // (query_heads // kv_heads), the grouping of Llama-family models.

Levels. L4: `append` grows the time dimension and `attend` returns the right shape. L5: the
output equals full causal attention at every prefix; validation (ValueError, cache unchanged);
float32 softmax that survives large logits; `reset`, `release`; lengths tracked apart from
capacity; ragged batches through `counts`; `decode_step` projects and caches only what it must;
and your own tests in test_kv_cache.py catch real mistakes. L6: GQA/MQA, RoPE at absolute
positions, `reorder` and `fork` for beam search, finished beams, bf16/fp16 caches, and an
`append` that does not reallocate on every step. L6+, once L6 passes (points of their own,
outside the 100): `attend_chunk` verifies a chunk of drafts in one call, `truncate` rolls
rejected drafts back, `KVCache(window=W)` slides a window (`kata rubric` lists the items).

Replace every `raise NotImplementedError` below (L6+'s three last, when L6 passes). `apply_rope` is given: use it as is.

Grade it, with your tests in test_kv_cache.py beside it:
    kata grade                     # in a workspace (kata init DIR) or at the kata's root
    kata grade --item ID           # one item; --level L5 up to a level; --watch on every save
    kata hint ID                   # a hint for an item, one step at a time
Run your own tests where this file is:  python -m pytest -q test_kv_cache.py
"""

import torch
from torch import Tensor


class KVCache:
    """One attention layer's cache for a batch of sequences.

    Attributes the grader reads (plain attributes or properties, your choice):
        keys:     Tensor | None  [B, Hkv, T, D], the valid prefix, T = max(lengths). A view into
                  larger storage is fine. None when the cache is empty.
        values:   Tensor | None  same layout as keys.
        lengths:  Tensor | None  int64 [B], the number of valid positions of each sequence.
                  None when empty.
        capacity: int            time slots allocated in storage; 0 when empty; always
                  >= max(lengths). Lengths and capacity are separate facts.
        positions: Tensor | None int64 [B], L6+: the tokens each row has appended since the
                  cache was made or reset, or the row released (then 0); the absolute position
                  of its next token. Without a window it equals lengths. None when empty.

    `KVCache(capacity=N)` allocates N slots at the first append. With no capacity, or when a row
    would outgrow it, storage grows geometrically (doubling, say), so n single-token appends
    cause O(log n) reallocations, not n.

    `KVCache(window=W)` (L6+, W >= 1, else ValueError): a sliding-window cache (Mistral's
    convention). The query at absolute position p attends positions max(0, p - W + 1) .. p
    only, in attend, attend_chunk and decode_step alike; RoPE stays at absolute positions.
    lengths[b] is the number of positions row b holds: min(positions[b], W) after single-token
    appends, min(positions[b], W + t - 1) right after a chunk of t (the chunk's first query still
    needs its W - 1 predecessors); keys and values hold those positions in time order. Storage
    never grows past W + t - 1 slots for the largest chunk t appended: a ring buffer, whose old
    positions are overwritten. With a window, capacity is ignored; `append` with counts follows
    the same rules row by row.
    """

    def __init__(self, capacity: int | None = None, window: int | None = None):
        self.requested_capacity = capacity  # slots to allocate at the first append
        self.window = window  # L6+: None for a cache without a window
        self.keys: Tensor | None = None
        self.values: Tensor | None = None
        self.lengths: Tensor | None = None
        self.capacity: int = 0


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    """Append new positions along the time dimension.

    new_key, new_value: [B, Hkv, t, D], t >= 1.
    counts: int64 [B], each in 0..t, default all t: how many of the t new positions are real for
        each row. Row b writes new_key[b, :, :counts[b]] at positions
        lengths[b] .. lengths[b] + counts[b] - 1. counts[b] == 0 means row b does not grow
        (a finished beam, a released slot, a shorter prompt).

    The first append after construction or `reset` fixes batch, kv_heads, head_dim, dtype and
    device. Anything incompatible raises ValueError with a message naming the offending dimension
    or property, and leaves the cache exactly as it was: wrong rank; key and value shapes differ;
    batch, kv_heads or head_dim differ from the cache; dtype or device differ; counts of wrong
    shape, dtype or range.
    """
    raise NotImplementedError


def attend(cache: KVCache, query: Tensor) -> Tensor:
    """Attention of the newest query over the cache.

    query: [B, Hq, 1, D]. Returns [B, Hq, 1, D] in the query's dtype and on its device.
    Row b attends over its positions 0 .. lengths[b] - 1 only. Scores are scaled by 1/sqrt(D);
    softmax in float32 over those positions, numerically stable for large logits; weights times
    values. A row whose length is 0 returns zeros. No causal mask: the newest query has no
    future position to block.

    ValueError on an empty cache, a query whose batch or head_dim differ from the cache's,
    Hq % Hkv != 0, or a dtype or device other than the cache's. Never modifies the cache or the
    query.
    """
    raise NotImplementedError


def reset(cache: KVCache) -> None:
    """Forget everything; the next append may start a batch of any shape, dtype or device."""
    raise NotImplementedError


def release(cache: KVCache, index: int) -> None:
    """Sequence `index` ended (EOS or cancellation).

    Its length becomes 0 and other rows are untouched. A later append with counts[index] > 0
    starts a new, unrelated sequence in that slot, which never sees the old one's keys or values.
    """
    raise NotImplementedError


def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    """One attention layer's incremental step.

    layer: has wq, wk, wv, wo (torch.nn.Linear, no bias), n_heads, n_kv_heads, head_dim and
        rope_base. wq maps d_model -> n_heads * head_dim; wk, wv map d_model ->
        n_kv_heads * head_dim; wo maps n_heads * head_dim -> d_model.
    x: [B, 1, d_model], the hidden state of each sequence's newest token.
    counts: int64 [B] of 0 or 1, default all 1: which rows take a token this step.

    Project only the new token (never the prefix). Apply RoPE (`apply_rope`, base
    layer.rope_base) to q and k at each row's absolute position cache.lengths[b] (0 for an empty
    cache; cache.positions[b] once you write L6+, which is the same number without a window). Append k and v (keys after RoPE; never q, never hidden states). Attend, merge the
    heads, apply wo. Returns [B, 1, d_model].
    """
    raise NotImplementedError


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """Beam search reordering (L6).

    beam_idx: int64 [B']. New row j is old row beam_idx[j], for keys, values and lengths alike.
    B' may differ from B (beam expansion). A beam search calls this on every layer's cache with
    the same indices.
    """
    raise NotImplementedError


def fork(cache: KVCache) -> KVCache:
    """An independent cache holding the same sequences at the same positions (L6).

    Writes to either cache never show in the other, and decoding on the fork continues at the
    copied lengths.
    """
    raise NotImplementedError


def attend_chunk(cache: KVCache, query: Tensor) -> Tensor:
    """Attention of the t newest queries at once (L6+: verifying t draft tokens in one call).

    query: [B, Hq, t, D], the queries of the t positions each row appended last (every row
    appended t). Returns [B, Hq, t, D] in the query's dtype. Query i of row b sits at absolute
    position p = positions[b] - t + i and attends its row's cached positions 0 .. p and no later
    one: inside a chunk the future is already in the cache, so this is where a mask is needed
    (with a window: max(0, p - W + 1) .. p). Scores and softmax in float32 as in `attend`; with
    t == 1 it equals `attend`. A row of length 0 returns zeros.

    ValueError as `attend` raises it, and when a non-empty row holds fewer than t positions.
    Never modifies the cache or the query.
    """
    raise NotImplementedError


def truncate(cache: KVCache, lengths: Tensor) -> None:
    """Roll back rejected draft tokens (L6+: speculative decoding).

    lengths: int64 [B]. Row b keeps positions 0 .. lengths[b] - 1 and forgets the rest; its
    lengths and positions become lengths[b], and its next append writes at lengths[b]. Nothing
    dropped is ever attended again: not by attend, not by attend_chunk, not after storage grows.
    Rows may keep different lengths (each accepted its own number of drafts). Truncating to the
    current lengths changes nothing; to 0 empties the row. Capacity is not given back.

    A length below 0 or above the row's current positions raises ValueError and changes nothing.
    With a window: positions become lengths[b], lengths what the row still holds of positions
    0 .. lengths[b] - 1 (lengths[b] minus its oldest held position); ValueError, changing
    nothing, exactly when the next query's window would need a position already overwritten.
    """
    raise NotImplementedError


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
