"""Beyond the framework, paged: attention that reads the blocks where they lie (torch.compile).

A step after the paged cache and the fused step (solutions/README.md): paged_kv_cache.py with
the math of its `attend` replaced by `fused_paged_attention` below. `attend` still validates the
query and builds the batch's padded block tables and lengths, then returns
`fused_paged_attention(query, self.k_pool, self.v_pool, self.k_scale, self.v_scale, index,
lengths)`; the gather scratch goes (`kata solution --diff paged fused-paged` shows that file).

Eager, the paged `attend` first gathers each sequence's blocks into position order: one more
read and write of the whole cache a step, and for int8 a float32 dequantized copy on top, before
the matmuls read it all again. `k_pool[blocks]` below is that gather written as indexing; compiled,
it is no copy but the address every loop reads from (block `blocks[i, w]` of the pool, in
place), and an int8 value is scaled in registers as it is read. This is what vLLM's
paged-attention kernel does, generated instead of hand-written.

The math is the fused step's, in the pool's layout: scores per block [N, W, Hkv, bs], one softmax
over a row's W blocks of bs slots (its max and sum run over two dimensions), each query head of
a GQA group a reduction of its own. Compiled without declaring shapes dynamic, torch.compile
makes the number of blocks dynamic once it changes and keeps the block size a constant, so that
a position's block and slot are a shift and a mask, not an integer division in the inner loop.
"""

from __future__ import annotations

import math
from functools import cache

import torch
from torch import Tensor

from benchmarks.fused_attention import compile_checked


def fused_paged_attention(
    query: Tensor,
    k_pool: Tensor,
    v_pool: Tensor,
    k_scale: Tensor | None,
    v_scale: Tensor | None,
    blocks: Tensor,
    lengths: Tensor,
) -> Tensor:
    """The serving contract's attend, as math only: row i of query [N, Hq, 1, D] over the first
    lengths[i] positions held by the blocks blocks[i] ([N, W] block ids in position order, a
    short table padded with any block id), pools [num_blocks, Hkv, bs, D]. An int8 pool comes
    with its float32 scales [num_blocks, Hkv, bs], other pools with None. Float32 scores and
    softmax; a row of length 0 gives zeros; the output has the query's dtype.
    """
    n, q_heads, _, head_dim = query.shape
    kv_heads, bs = k_pool.shape[1], k_pool.shape[2]
    width, groups = blocks.shape[1], q_heads // kv_heads
    q = query.reshape(n, 1, kv_heads, groups, 1, head_dim).float()  # [N, 1, Hkv, G, 1, D]
    keys = k_pool[blocks].float()  # [N, W, Hkv, bs, D]: read in place once compiled
    values = v_pool[blocks].float()
    if k_scale is not None:  # int8: one scale per token and head
        keys = keys * k_scale[blocks][..., None]
        values = values * v_scale[blocks][..., None]
    past_end = torch.arange(width * bs, device=query.device) >= lengths[:, None]  # [N, W * bs]
    past_end = past_end.view(n, width, 1, bs)  # position w * bs + s is slot s of block w
    # Slots past a length (a padded table's blocks, a last block's unwritten end) may hold
    # anything, even NaN, and 0 * NaN is NaN: they are zeroed in V, masked in the scores.
    values = values.masked_fill(past_end[..., None], 0.0)
    outs = []
    for g in range(groups):  # unrolled when compiled: G reductions over the same blocks
        scores = (keys * q[:, :, :, g]).sum(-1) / math.sqrt(head_dim)  # [N, W, Hkv, bs]
        scores = scores.masked_fill(past_end, float("-inf"))
        top = scores.amax(dim=(1, 3), keepdim=True)  # softmax over all W * bs positions
        exp = torch.exp(scores - top)
        weights = exp / exp.sum(dim=(1, 3), keepdim=True)
        weights = weights.masked_fill((lengths == 0).view(n, 1, 1, 1), 0.0)  # no NaN for length 0
        # A block's slots first, then the blocks: one sum over both walks down all of a head's
        # rows once per 8 columns of D; a block at a time, the walks stay in its 16 rows.
        outs.append((weights[..., None] * values).sum(3).sum(1))  # [N, Hkv, D]
    out = torch.stack(outs, dim=2)  # [N, Hkv, G, D]: head h = kv * G + g
    return out.reshape(n, q_heads, 1, head_dim).to(query.dtype)


@cache  # one compiled function for the float32 and the int8 subjects of a bench
def compiled_paged_attention():
    """`fused_paged_attention` compiled; Unavailable when torch.compile fails here or its result
    differs from eager PyTorch on a small case."""
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 1, 8, generator=gen)
    k_pool, v_pool = torch.randn(6, 2, 4, 8, generator=gen), torch.randn(6, 2, 4, 8, generator=gen)
    blocks, lengths = torch.tensor([[3, 1, 4], [2, 0, 0]]), torch.tensor([10, 5])
    return compile_checked(
        fused_paged_attention, (query, k_pool, v_pool, None, None, blocks, lengths), dynamic=None
    )
