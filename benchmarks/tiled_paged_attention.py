"""Eager paged attention that reads the blocks a tile at a time: int8 is upcast a tile at a time,
and scaled in the scores, not in the cache.

A step after the paged cache (solutions/README.md): paged_kv_cache.py with the math of its
`attend` replaced by `tiled_paged_attention` below. `attend` still validates the query and builds
the batch's padded block tables and lengths, then returns `tiled_paged_attention(query,
self.k_pool, self.v_pool, self.k_scale, self.v_scale, index, lengths)`; the gather and its
scratch buffers go (`kata solution --diff paged tiled-paged` shows that file).

The paged `attend` gathers each sequence's blocks into a scratch the size of the cache, and for
int8 upcasts that into a float32 scratch four times its size and scales it in place: three passes
over the whole cache before the matmuls read it again. Here the same work is done 32 blocks
(512 positions) at a time, so that each copy is a tile that stays in the processor's cache:
- the gather of a tile (`index_select`) is a quarter of float32's bytes in int8;
- its float32 upcast is 2 MiB at 8 KV heads and D=128, read back at once by the matmul;
- the scale is not applied to the tile at all. A token's int8 key is its float key divided by its
  scale s, so q · key = s * (q · int8 key): one multiply per score instead of one per value.
  The same holds for values: s * weight, then the weighted sum of int8 values.
The softmax still sees every score at once, as in the tiled step of the dense path. Paged-
attention kernels scale int8 in the same place, and go one step further: they read each block
where it lies, once, where this eager step still copies each tile twice (the gather, the upcast)
before the matmuls read it. No compiler is needed.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def tiled_paged_attention(query: Tensor, k_pool: Tensor, v_pool: Tensor, k_scale: Tensor | None,
                          v_scale: Tensor | None, blocks: Tensor, lengths: Tensor) -> Tensor:
    """The serving contract's attend, as math only: row i of query [N, Hq, 1, D] over the first
    lengths[i] positions held by the blocks blocks[i] ([N, W] block ids in position order, a
    short table padded with any block id), pools [num_blocks, Hkv, bs, D]. An int8 pool comes
    with its float32 scales [num_blocks, Hkv, bs], other pools with None. Float32 scores and
    softmax; a row of length 0 gives zeros; the output has the query's dtype.
    """
    tile_blocks = 32  # blocks of 16 slots: 512 positions, 2 MiB in float32 at Hkv=8, D=128
    n, q_heads, _, head_dim = query.shape
    kv_heads, bs = k_pool.shape[1], k_pool.shape[2]
    width, groups = blocks.shape[1], q_heads // kv_heads
    q = query.reshape(n, 1, kv_heads, groups, head_dim).float()  # [N, 1, Hkv, G, D]
    past_end = torch.arange(width * bs, device=query.device) >= lengths[:, None]  # [N, W * bs]
    past_end = past_end.view(n, width, 1, 1, bs)  # position w * bs + s is slot s of block w

    def tile(pool: Tensor, scale: Tensor | None, w: int) -> tuple[Tensor, Tensor | None]:
        """Blocks w .. w + tile_blocks - 1 of every row: [N, tw, Hkv, bs, D] float32, and their
        scales [N, tw, Hkv, 1, bs] (None for a float pool)."""
        ids = blocks[:, w:w + tile_blocks].flatten()  # [N * tw]
        x = pool.view(len(pool), -1).index_select(0, ids)  # a block a row: a copy per block
        x = x.view(n, -1, *pool.shape[1:]).float()
        if scale is None:
            return x, None
        return x, scale.index_select(0, ids).view(n, -1, kv_heads, 1, bs)

    scores = q.new_empty(n, width, kv_heads, groups, bs)  # [N, W, Hkv, G, bs] float32
    for w in range(0, width, tile_blocks):
        keys, scale = tile(k_pool, k_scale, w)
        scores[:, w:w + tile_blocks] = q @ keys.transpose(-1, -2)  # [N, tw, Hkv, G, bs]
        if scale is not None:  # int8: q · (s * k) = s * (q · k)
            scores[:, w:w + tile_blocks] *= scale
    scores /= math.sqrt(head_dim)
    # Slots past a length (a padded table's blocks, a last block's unwritten end) may hold
    # anything, even NaN: masked in the scores here, zeroed in V and its scales below.
    scores = scores.masked_fill(past_end, float("-inf"))
    scores = scores.permute(0, 2, 3, 1, 4).reshape(n, kv_heads, groups, width * bs)
    weights = torch.softmax(scores, dim=-1)  # over all W * bs positions: [N, Hkv, G, W * bs]
    weights = weights.masked_fill((lengths == 0)[:, None, None, None], 0.0)  # no NaN for length 0
    weights = weights.view(n, kv_heads, groups, width, bs).permute(0, 3, 1, 2, 4)

    out = q.new_zeros(n, kv_heads, groups, head_dim)  # [N, Hkv, G, D] float32
    for w in range(0, width, tile_blocks):
        values, scale = tile(v_pool, v_scale, w)
        stale = past_end[:, w:w + tile_blocks]  # [N, tw, 1, 1, bs]
        if stale.any():  # only the tiles at the rows' ends hold slots past a length
            values = values.masked_fill(stale.transpose(-1, -2), 0.0)  # 0 * NaN would be NaN
            scale = None if scale is None else scale.masked_fill(stale, 0.0)
        tile_weights = weights[:, w:w + tile_blocks]  # [N, tw, Hkv, G, bs]
        if scale is not None:  # int8: sum of w * (s * v) = sum of (w * s) * v
            tile_weights = tile_weights * scale
        out += (tile_weights @ values).sum(dim=1)  # each block's share [N, tw, Hkv, G, D], summed
    return out.reshape(n, q_heads, 1, head_dim).to(query.dtype)
