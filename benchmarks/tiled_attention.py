"""Eager attention that reads a bf16 or fp16 cache in tiles: the float32 upcast costs a tile, not
the cache.

A step after the preallocated one (solutions/README.md): kv_cache.py with the math of its
`attend` replaced by `tiled_attention` below. `attend` still validates the query, then returns
`tiled_attention(query, cache.keys, cache.values, cache.lengths)` on the cache's views; nothing
else changes (`kata solution --diff preallocated tiled` shows that file).

The preallocated `attend` spends most of a bf16 step on two copies, not on attention:
- `keys.float()` writes a float32 copy of the whole cache (64 MiB at T=16384, 8 KV heads,
  D=128), fresh memory every step, so mostly page faults: 40 ms on one thread, where the
  matmul takes 11.
- `weights @ values` on the cache's view (`[B, Hkv, T, D]` cut from `[B, Hkv, capacity, D]`)
  makes matmul copy V into contiguous memory first: 20 ms more.
Both copies are of the whole cache. Done 1024 positions at a time, each upcast is a few MiB
that stays in the processor's cache, and a tile of V is small enough that its copy costs
nothing either. The softmax still sees every score at once: the scores, [B, Hkv, G, T] float32,
are small (64 KiB at T=16384, MHA). Weights·V is accumulated in float32, tile by tile.

This is the idea of FlashAttention's decode kernels in plain PyTorch, half of it: tiles, but
not the online softmax that would let each tile be read once for both products. On a float32
cache the upcasts are free and only the copy of V goes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def tiled_attention(query: Tensor, keys: Tensor, values: Tensor, lengths: Tensor) -> Tensor:
    """The contract's attend, as math only: [B, Hq, 1, D] over [B, Hkv, T, D] -> [B, Hq, 1, D].

    Row b attends over positions 0 .. lengths[b] - 1 (int64 [B]); float32 scores and softmax; a
    row of length 0 gives zeros; the output has the query's dtype.
    """
    tile_size = 1024  # positions: 8 KV heads x 1024 x D=128 in float32 is 4 MiB
    batch, q_heads, _, head_dim = query.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    q = query.reshape(batch, kv_heads, q_heads // kv_heads, head_dim).float()  # [B, Hkv, G, D]
    scores = q.new_empty(*q.shape[:3], length)  # [B, Hkv, G, T] float32
    for start in range(0, length, tile_size):  # float32 scores from a float32 copy of one tile
        tile = keys[:, :, start : start + tile_size].float()  # [B, Hkv, tile_size, D]
        scores[..., start : start + tile_size] = q @ tile.transpose(-1, -2)
    scores /= math.sqrt(head_dim)
    past_end = torch.arange(length, device=keys.device) >= lengths[:, None]  # [B, T]
    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # [B, Hkv, G, T]
    weights = weights.masked_fill((lengths == 0)[:, None, None, None], 0.0)  # no NaN for length 0
    out = q.new_zeros(q.shape)  # [B, Hkv, G, D] float32
    for start in range(0, length, tile_size):
        out += (
            weights[..., start : start + tile_size]
            @ values[:, :, start : start + tile_size].float()
        )
    return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)
