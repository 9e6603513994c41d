"""Eager paged attention that reads the blocks a tile at a time: int8 is upcast a tile at a time,
and scaled in the scores, not in the cache.

A step after the paged cache (solutions/README.md): paged_kv_cache.py with the math of its
`attend` replaced by `tiled_paged_attention` below. `attend` still validates the query and builds
the batch's padded block tables and lengths, then returns `tiled_paged_attention(query,
self.k_pool, self.v_pool, self.k_scale, self.v_scale, index, lengths, self._scratch)`; the
gather goes, and the scratch buffers it kept from call to call hold tiles instead (`kata
solution --diff paged tiled-paged` shows that file).

The paged `attend` gathers each sequence's blocks into a scratch the size of the cache, and for
int8 upcasts that into a float32 scratch four times its size and scales it in place: three passes
over the whole cache before the matmuls read it again. Here the same work is done 128 blocks
(2048 positions) at a time, in two tile buffers reused by every tile and kept from call to call
(the paged cache's `_scratch`):
- the gather of a tile (`index_select`) writes its blocks in position order into the first: in
  int8 a quarter of float32's bytes (2 MiB at 8 KV heads and D=128);
- the float32 upcast of that tile goes into the second (8 MiB), which the matmul reads at once.
  A float32 pool needs no upcast: its gather writes the tile the matmul reads;
- the scale is not applied to the tile at all. A token's int8 key is its float key divided by its
  scale s, so q · key = s * (q · int8 key): one multiply per score instead of one per value,
  for all scores at once after the loop. The same holds for values: the weights are multiplied
  by their tokens' scales once, before the weighted sums of int8 values.
The softmax still sees every score at once, as in the tiled step of the dense path. Paged-
attention kernels scale int8 in the same place, and go one step further: they read each block
where it lies, once, where this eager step still copies each tile (the gather, and for int8 the
upcast) before the matmuls read it. No compiler is needed.

The tile's size is measured, not derived (int8, T=16384, on the machine of the table in
solutions/README.md). Each tile costs a dozen PyTorch calls whatever its size, and its matmuls
are one small product per block and head, so small tiles are slow: 32 blocks took 2.1x bare
float32 attention, 64 blocks 1.6x, 128 blocks 1.3-1.5x, and 256 (a 16 MiB float32 tile, half
the L3 cache) 1.9x again. Keeping the buffers matters too: a tile made fresh is new memory,
which the OS fills a page at a time (32 fresh 2 MiB tiles a step: 2.1-2.7x), and the two buffers
made fresh once a call cost about 1 ms a step more than kept ones, interleaved in one process.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def tiled_paged_attention(
    query: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    k_scale: Tensor | None,
    v_scale: Tensor | None,
    blocks: Tensor,
    lengths: Tensor,
    scratch,
) -> Tensor:
    """The serving contract's attend, as math only: row i of query [N, Hq, 1, D] over the first
    lengths[i] positions held by the blocks blocks[i] ([N, W] block ids in position order, a
    short table padded with any block id), pools [num_blocks, Hkv, bs, D]. An int8 pool comes
    with its float32 scales [num_blocks, Hkv, bs], other pools with None. Float32 scores and
    softmax; a row of length 0 gives zeros; the output has the query's dtype.

    `scratch(name, dtype, n)` gives a [n, Hkv, bs, D] buffer of that dtype, the same memory for
    the same name from call to call, holding anything until written (the cache's `_scratch`).
    """
    tile_blocks = 128  # blocks of 16 slots: 2048 positions, 8 MiB in float32 at Hkv=8, D=128
    n, q_heads, _, head_dim = query.shape
    kv_heads, bs = k_pool.shape[1], k_pool.shape[2]
    width, groups = blocks.shape[1], q_heads // kv_heads
    q = query.reshape(n, 1, kv_heads, groups, head_dim).float()  # [N, 1, Hkv, G, D]
    past_end = torch.arange(width * bs, device=query.device) >= lengths[:, None]  # [N, W * bs]
    past_end = past_end.view(n, width, 1, 1, bs)  # position w * bs + s is slot s of block w

    tile_size = n * min(tile_blocks, width)  # blocks in the largest tile
    gathered = scratch("tile", k_pool.dtype, tile_size)  # a tile, blocks in order
    upcast = None if k_pool.dtype == torch.float32 else scratch("tile32", torch.float32, tile_size)

    def tile(pool: Tensor, w: int) -> Tensor:
        """Blocks w .. w + tile_blocks - 1 of every row, [N, tw, Hkv, bs, D] float32, in a tile
        buffer: the next tile overwrites it."""
        ids = blocks[:, w : w + tile_blocks].flatten()  # [N * tw]
        x = gathered[: len(ids)]  # [N * tw, Hkv, bs, D]
        torch.index_select(pool.flatten(1), 0, ids, out=x.flatten(1))  # a block a row
        if upcast is not None:
            x = upcast[: len(ids)].copy_(x)
        return x.view(n, -1, *pool.shape[1:])

    scores = q.new_empty(n, width, kv_heads, groups, bs)  # [N, W, Hkv, G, bs] float32
    for w in range(0, width, tile_blocks):
        torch.matmul(q, tile(k_pool, w).transpose(-1, -2), out=scores[:, w : w + tile_blocks])
    scores /= math.sqrt(head_dim)
    if k_scale is not None:  # int8: q · (s * k) = s * (q · k)
        scores *= k_scale.index_select(0, blocks.flatten()).view(n, width, kv_heads, 1, bs)
    # Slots past a length (a padded table's blocks, a last block's unwritten end) may hold
    # anything, even NaN: masked in the scores here, zeroed in V and its scales below.
    scores.masked_fill_(past_end, float("-inf"))
    scores = scores.permute(0, 2, 3, 1, 4).reshape(n, kv_heads, groups, width * bs)
    weights = torch.softmax(scores, dim=-1)  # over all W * bs positions: [N, Hkv, G, W * bs]
    weights = weights.masked_fill((lengths == 0)[:, None, None, None], 0.0)  # no NaN for length 0
    weights = weights.view(n, kv_heads, groups, width, bs).permute(0, 3, 1, 2, 4)
    if v_scale is not None:  # int8: sum of w * (s * v) = sum of (w * s) * v
        v_scales = v_scale.index_select(0, blocks.flatten()).view(n, width, kv_heads, 1, bs)
        weights = weights * v_scales.masked_fill(past_end, 0.0)

    first_stale = int(lengths.min()) // bs  # the first block where some row has ended
    out = q.new_zeros(n, kv_heads, groups, head_dim)  # [N, Hkv, G, D] float32
    for w in range(0, width, tile_blocks):
        values = tile(v_pool, w)
        if w + tile_blocks > first_stale:  # 0 * NaN would be NaN
            values.masked_fill_(past_end[:, w : w + tile_blocks].transpose(-1, -2), 0.0)
        out += (weights[:, w : w + tile_blocks] @ values).sum(dim=1)  # each block's share, summed
    return out.reshape(n, q_heads, 1, head_dim).to(query.dtype)
